"""A user's own JAX BERT training loop on a GPU, timed and captured with tfbertperf.jax_steps.StepTimer (the real
jax.profiler, its default options: Python tracer on), in three regimes, each next to its truth measured in the same
process without the profiler (issue 29: the JAX helper, the loader inside a hand-off frame, two compiled variants
of one function).  Needs a GPU; run on the lent device machine (see BENCHMARKS.md for the command), its captures
then read here with `tfbertperf analyze`.

Regimes (one encoder, `--layers`/`--hidden`, batch `--batch`, seq `--seq`, bf16 compute on f32 parameters, Adam):
  compute  batches already on the device: the step alone (truth: input 0 %)
  loader   `next_batch(i)`: NumPy masking and shuffling of a host batch in a Python loop, then
           `jax.device_put` — in one frame, no prefetch (issue 29's failure shape 5)
  retrace  the same jitted function compiled for bfloat16, run, then retraced for float32: the capture's window
           runs the float32 variant while the process also holds the bfloat16 one (failure shape 4)
  mixed    both variants in the window, one float32 step after two bfloat16 ones
  loader_notrace  the loader captured without the Python tracer (ProfileOptions python_tracer_level 0)
  loader_thread   the loader advice followed: next_batch run ahead in a background thread, 2 batches deep
Also the batch what-if: the bfloat16 step on device batches of twice the size (what "raise the batch size" buys).

Truth: T the regime's step, T_c the same step on device-resident batches, in alternating unprofiled blocks
(the first SETTLE steps of each block untimed); input = (T − T_c) / T.  For retrace, T is the float32 step and
T_c the bfloat16 one (what the precision advice would buy).  Writes OUT/<regime>/ (StepTimer's logdir) and
OUT/truth.json.

    python tests/programs/jax_gpu_user.py --out /tmp/g [--layers 12 --hidden 768 --batch 32 --seq 128]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from tfbertperf.jax_steps import StepTimer

SETTLE, MASK_ID, VOCAB = 3, 3, 8192


def init(key, layers: int, hidden: int, ff: int):
    keys = iter(jax.random.split(key, 4 + 6 * layers))

    def dense(i, o):
        return {"w": jax.random.normal(next(keys), (i, o)) * 0.02, "b": jnp.zeros(o)}

    def norm():
        return {"g": jnp.ones(hidden), "b": jnp.zeros(hidden)}

    return {"emb": jax.random.normal(next(keys), (VOCAB, hidden)) * 0.02,
            "pos": jax.random.normal(next(keys), (512, hidden)) * 0.02,
            "layers": [{"qkv": dense(hidden, 3 * hidden), "out": dense(hidden, hidden), "n1": norm(),
                        "ff1": dense(hidden, ff), "ff2": dense(ff, hidden), "n2": norm()} for _ in range(layers)],
            "head": dense(hidden, VOCAB)}


def _ln(x, p):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(v + 1e-12) * p["g"].astype(x.dtype) + p["b"].astype(x.dtype)


def _lin(x, p):
    return x @ p["w"].astype(x.dtype) + p["b"].astype(x.dtype)


def loss_fn(params, tokens, labels, heads: int, dtype):
    b, s = tokens.shape
    x = (params["emb"][tokens] + params["pos"][:s]).astype(dtype)
    for lp in params["layers"]:
        q, k, v = jnp.split(_lin(x, lp["qkv"]), 3, -1)
        q, k, v = (t.reshape(b, s, heads, -1).transpose(0, 2, 1, 3) for t in (q, k, v))
        att = jax.nn.softmax((q @ k.transpose(0, 1, 3, 2)) * q.shape[-1] ** -0.5, -1)  # a Python float keeps the dtype
        a = (att @ v).transpose(0, 2, 1, 3).reshape(b, s, -1)
        x = _ln(x + _lin(a, lp["out"]), lp["n1"])
        x = _ln(x + _lin(jax.nn.gelu(_lin(x, lp["ff1"])), lp["ff2"]), lp["n2"])
    logits = _lin(x, params["head"]).astype(jnp.float32)
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), labels[..., None], -1))


@partial(jax.jit, static_argnames=("heads", "dtype"))
def train_step(state, tokens, labels, heads: int, dtype=jnp.bfloat16):
    params, m, v, t = state
    loss, g = jax.value_and_grad(loss_fn)(params, tokens, labels, heads, dtype)
    t = t + 1
    m = jax.tree_util.tree_map(lambda a, b: 0.9 * a + 0.1 * b, m, g)
    v = jax.tree_util.tree_map(lambda a, b: 0.999 * a + 0.001 * b * b, v, g)
    params = jax.tree_util.tree_map(
        lambda p, a, b: p - 1e-4 * (a / (1 - 0.9 ** t)) / (jnp.sqrt(b / (1 - 0.999 ** t)) + 1e-8), params, m, v)
    return (params, m, v, t), loss


def augment(tokens: np.ndarray, rng, rounds: int) -> np.ndarray:
    """A user's per-example NumPy augmentation: masking and a local shuffle, `rounds` times per example."""
    out = tokens.copy()
    for row in out:
        for _ in range(rounds):
            mask = rng.random(row.shape[0]) < 0.15
            row[mask] = MASK_ID
            j = int(rng.integers(0, row.shape[0] - 8))
            row[j:j + 8] = rng.permutation(row[j:j + 8])
    return out


class Ahead:
    """`make(i)` run ahead in a background thread, `depth` results deep; call it for the next one."""

    def __init__(self, make, depth: int = 2) -> None:
        import queue
        import threading

        self.q, self.running = queue.Queue(depth), True

        def loop():
            i = 0
            while self.running:
                self.q.put(make(i))
                i += 1

        threading.Thread(target=loop, daemon=True).start()

    def __call__(self, i):
        return self.q.get()

    def stop(self) -> None:
        self.running = False
        while not self.q.empty():
            self.q.get_nowait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=50, help="steps of each StepTimer run")
    ap.add_argument("--window", default="30:40", help="each StepTimer run's captured steps")
    ap.add_argument("--rounds", type=int, default=4, help="truth: blocks of each kind")
    ap.add_argument("--block", type=int, default=15, help="truth: steps per block")
    ap.add_argument("--regimes", default="compute,loader,retrace,mixed",
                    help="compute always runs (T_c); also loader_notrace, loader_thread; retrace runs mixed and the "
                         "batch what-if too")
    ap.add_argument("--loader-share", type=float, default=0.5, help="loader: its augmentation ≈ this × T_c")
    a = ap.parse_args()
    out = Path(a.out)
    heads = a.hidden // 64
    rng = np.random.default_rng(0)
    host = [rng.integers(5, VOCAB, size=(a.batch, a.seq)).astype(np.int32) for _ in range(8)]
    on_device = [jax.device_put(b) for b in host]
    params = init(jax.random.PRNGKey(0), a.layers, a.hidden, 4 * a.hidden)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    state = [(params, zeros, zeros, jnp.zeros((), jnp.int32))]

    def step(tokens, dtype=jnp.bfloat16):
        state[0], loss = train_step(state[0], tokens, tokens, heads=heads, dtype=dtype)
        return loss

    def block(feed, n, dtype=jnp.bfloat16) -> list[float]:
        times = []
        for i in range(n):
            t0 = time.perf_counter()
            jax.block_until_ready(step(feed(i), dtype))
            if i >= SETTLE:
                times.append((time.perf_counter() - t0) * 1e3)
        return times

    def truth(feed_t, feed_c, dtype_t=jnp.bfloat16, dtype_c=jnp.bfloat16) -> dict:
        T, Tc = [], []
        for _ in range(a.rounds):
            T += block(feed_t, a.block, dtype_t)
            Tc += block(feed_c, a.block, dtype_c)
        t, tc = statistics.fmean(T), statistics.fmean(Tc)
        return {"T_ms": round(t, 3), "T_c_ms": round(tc, 3), "input_fraction": round(max(0.0, (t - tc) / t), 4)}

    def timed(name: str, feed, dtype=jnp.bfloat16, dtype_of=None, options=None) -> dict:
        timer = StepTimer(out / name, profile_steps=a.window, warmup_steps=5, profiler_options=options)
        for i in range(a.steps):
            with timer.step() as s:
                s.result = step(feed(i), dtype_of(i) if dtype_of else dtype)
        path = timer.close()
        w0, w1 = (int(x) for x in a.window.split(":"))
        st = timer.step_times_ms
        return {"step_file": str(path.relative_to(out)), "profiled_step_ms": round(statistics.fmean(st[w0:w1]), 3),
                "unprofiled_step_ms": round(statistics.fmean(st[5:w0 - 1] + st[w1 + 1:]), 3)}

    def device_feed(i):
        return on_device[i % len(on_device)]

    print(json.dumps({"devices": [str(d) for d in jax.devices()], "jax": jax.__version__}), flush=True)
    block(device_feed, 5)  # compile the bfloat16 step
    report = {"device": jax.devices()[0].device_kind, "jax": jax.__version__,
              "model": f"BERT-style encoder, {a.layers} layers, hidden {a.hidden}, {heads} heads, batch {a.batch}, "
                       f"seq {a.seq}, vocab {VOCAB}; Adam; bf16 compute on f32 parameters", "regimes": {}}
    regimes = set(a.regimes.split(","))
    report["regimes"]["compute"] = {**truth(device_feed, device_feed), **timed("compute", device_feed),
                                    "note": "batches already on the device"}
    print("compute", report["regimes"]["compute"], flush=True)

    t_c = report["regimes"]["compute"]["T_c_ms"]
    per_round = []
    for _ in range(5):
        t0 = time.perf_counter()
        augment(host[0], rng, 1)
        per_round.append((time.perf_counter() - t0) * 1e3)
    per_round = statistics.median(per_round)
    rounds = max(1, round(a.loader_share * t_c / per_round))

    def next_batch(i):  # the loader: augmentation and the hand-off in one frame, no prefetch
        x = augment(host[i % len(host)], rng, rounds)
        return jax.device_put(x)

    if "loader" in regimes:
        report["regimes"]["loader"] = {**truth(next_batch, device_feed), **timed("loader", next_batch),
                                       "augment_rounds": rounds,
                                       "note": f"next_batch: NumPy masking/shuffling ({rounds} rounds per example) "
                                               "then jax.device_put, in the training thread, no prefetch"}
        print("loader", report["regimes"]["loader"], flush=True)
    if "loader_notrace" in regimes:
        options = jax.profiler.ProfileOptions()
        options.python_tracer_level = 0
        report["regimes"]["loader_notrace"] = {**timed("loader_notrace", next_batch, options=options),
                                               "note": "the loader regime captured without the Python tracer "
                                                       "(its truth: the loader regime's)"}
        print("loader_notrace", report["regimes"]["loader_notrace"], flush=True)
    if "loader_thread" in regimes:  # the loader's advice followed: the same loader in a background thread
        ahead = Ahead(next_batch)
        report["regimes"]["loader_thread"] = {**truth(ahead, device_feed), **timed("loader_thread", ahead),
                                              "note": "next_batch run ahead in a background thread, 2 batches "
                                                      "deep (the loader advice followed)"}
        ahead.stop()
        print("loader_thread", report["regimes"]["loader_thread"], flush=True)
    if "retrace" not in regimes:
        (out / "truth.json").write_text(json.dumps(report, indent=1))
        return

    block(device_feed, 5, jnp.float32)  # the float32 variant of the same function: a second program, one name
    report["regimes"]["retrace"] = {**truth(device_feed, device_feed, jnp.float32, jnp.bfloat16),
                                    **timed("retrace", device_feed, jnp.float32),
                                    "note": "train_step compiled for bfloat16 and run, then for float32; the capture "
                                            "runs float32.  T: the float32 step, T_c: the bfloat16 step"}
    print("retrace", report["regimes"]["retrace"], flush=True)

    def every_third_f32(i):
        return jnp.float32 if i % 3 == 2 else jnp.bfloat16

    report["regimes"]["mixed"] = {**timed("mixed", device_feed, dtype_of=every_third_f32),
                                  "note": "one float32 step after two bfloat16 steps, both variants in the window"}
    print("mixed", report["regimes"]["mixed"], flush=True)

    double = [jax.device_put(np.concatenate([host[i], host[(i + 1) % len(host)]])) for i in range(len(host))]
    block(lambda i: double[i % len(double)], 5)  # compile the double batch
    tb = truth(lambda i: double[i % len(double)], device_feed)
    report["batch_whatif"] = {"batch": 2 * a.batch, "step_ms": tb["T_ms"], "base_step_ms": tb["T_c_ms"],
                              "throughput_ratio": round(2 * tb["T_c_ms"] / tb["T_ms"], 3),
                              "note": "sequences/s at twice the batch ÷ at the batch, bfloat16, device batches"}
    print("batch_whatif", report["batch_whatif"], flush=True)
    (out / "truth.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
