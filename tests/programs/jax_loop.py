"""A user's own JAX training loop on the CPU wrapped in tfbertperf.jax_steps.StepTimer with the real jax.profiler: a
jitted 2-layer MLP trained by SGD on a random regression problem.  Run in its own interpreter by
tests/test_jax_steps.py, so that the pytest workers never import JAX (JAX warns that a fork after its threads
started may deadlock, and the suite forks storage emulators).  Prints one JSON line:
{"losses": [...], "step_times_ms": [...], "step_file": path}.

    python tests/programs/jax_loop.py --logdir /tmp/j --steps 30 --window 10:20 [--no-python-tracer]
"""

from __future__ import annotations

import argparse
import json

import jax
import jax.numpy as jnp

from tfbertperf.jax_steps import StepTimer


def problem():
    """A jitted SGD step of a 2-layer MLP on a random regression problem, its parameters and batch."""
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(0), 3)
    x = jax.random.normal(k1, (256, 32))
    y = x @ jax.random.normal(k2, (32, 1))
    params = {"w1": jax.random.normal(k3, (32, 64)) * 0.1, "b1": jnp.zeros(64), "w2": jnp.zeros((64, 1))}

    def loss_fn(p, x, y):
        return jnp.mean((jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] - y) ** 2)

    @jax.jit
    def train_step(p, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
        return jax.tree_util.tree_map(lambda a, g: a - 0.05 * g, p, grads), loss

    return train_step, params, (x, y)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logdir", required=True)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--window", default="10:20")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--no-python-tracer", action="store_true", help="ProfileOptions with python_tracer_level = 0")
    a = ap.parse_args()
    options = None
    if a.no_python_tracer:
        options = jax.profiler.ProfileOptions()
        options.python_tracer_level = 0
    timer = StepTimer(a.logdir, profile_steps=a.window, warmup_steps=a.warmup, profiler_options=options)
    train_step, params, (x, y) = problem()
    losses = []
    for _ in range(a.steps):
        with timer.step() as step:
            params, loss = train_step(params, x, y)
            step.result = loss  # waited for with jax.block_until_ready before the step's time is taken
        losses.append(float(loss))
    path = timer.close()
    print(json.dumps({"losses": losses, "step_times_ms": timer.step_times_ms, "step_file": str(path)}), flush=True)


if __name__ == "__main__":
    main()
