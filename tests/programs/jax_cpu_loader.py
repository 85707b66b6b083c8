"""A user's own JAX loop on the CPU fed by a Python loader on the training thread, captured with StepTimer, next to
its what-if truth measured in the same process (tools/bench/bench_jax_cpu_loader.py).

Loaders (each yields a (256, 512) float32 batch for a jitted 3-layer MLP step):
  wait     a generator that waits --ms per batch (a read from slow storage) and draws the batch
  numpy    NumPy augmentation per batch (random masking, a shuffle, a normalisation) repeated to ~--ms of CPU
  python   pure-Python work per batch (holds the interpreter lock: a tokenizer written in Python), a fixed amount
           that takes --ms on an idle machine (calibrated at the start), then the batch drawn
  none     the same batch from memory: compute-bound
--bare marks the steps with jax.profiler.StepTraceAnnotation around the step only (no StepTimer, no step file): the
batch is fetched between the markers, as a loop written after JAX's profiling docs does.
--thread runs the loader ahead in a background thread, 2 batches deep (the loader advice followed): the training
thread then takes each batch from a queue.  --no-python-tracer captures without JAX's Python tracer.

Truth: (T − T_c) / T, T the step with the loader, T_c the same jitted step fed one cached batch, in alternating
unprofiled blocks (half before, half after the profiled run) of --block timed steps each, after a block's first step
(and, with --thread, the 2 batches the loader queued while the cached block ran: a loader slower than the step would
read faster than it is).  Prints one JSON line:
{"loader", "truth", "T_ms", "T_c_ms", "halves", "logdir", "step_file", "probe" (StepTimer.what_if with
--probe), "checksum" (of the trained parameters: the same with and without the probe)}.

    python tests/programs/jax_cpu_loader.py --loader wait --ms 5 --out /tmp/j
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from tfbertperf.jax_steps import StepTimer

SHAPE = (256, 512)


def make_step():
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    p = {f"w{i}": jax.random.normal(k, (512, 512)) * 0.03 for i, k in enumerate(keys)}

    def loss_fn(p, x):
        h = jnp.tanh(jnp.tanh(x @ p["w0"]) @ p["w1"]) @ p["w2"]
        return jnp.mean((h - x) ** 2)

    @jax.jit
    def step(p, x):
        loss, g = jax.value_and_grad(loss_fn)(p, x)
        return jax.tree_util.tree_map(lambda a, b: a - 0.01 * b, p, g), loss

    return step, p


def python_work(n: int) -> int:
    """Pure-Python work (the interpreter lock held throughout): `n` rounds of hashing words into ids."""
    words, acc = [f"w{i}" for i in range(64)], 0
    for _ in range(n):
        acc += sum(hash(w) % 30522 for w in words)
    return acc


def rounds_for(ms: float) -> int:
    """The python_work rounds that take `ms` on this machine now (the best of 5 timings of 50 rounds)."""
    best = min(_timed_work(50) for _ in range(5))
    return max(1, round(50 * ms / 1e3 / best))


def _timed_work(n: int) -> float:
    t0 = time.perf_counter()
    python_work(n)
    return time.perf_counter() - t0


def loader(kind: str, ms: float):
    rng = np.random.default_rng(0)
    base = rng.standard_normal(SHAPE).astype("float32")
    rounds = rounds_for(ms) if kind == "python" else 0
    while True:
        if kind == "wait":
            time.sleep(ms / 1e3)
            yield rng.standard_normal(SHAPE).astype("float32")
        elif kind == "numpy":
            t0, x = time.perf_counter(), base
            while (time.perf_counter() - t0) * 1e3 < ms:
                x = base * (rng.random(SHAPE) > 0.15)
                x = x[rng.permutation(SHAPE[0])]
                x = (x - x.mean(axis=1, keepdims=True)) / (x.std(axis=1, keepdims=True) + 1e-6)
            yield x.astype("float32")
        elif kind == "python":
            python_work(rounds)
            yield base * (rng.random(SHAPE[1]) > 0.15).astype("float32")
        else:
            yield base


DEPTH = 2  # --thread: batches the loader thread keeps ready


def ahead(source, depth: int = DEPTH):
    """The batches of `source` made in a background thread, `depth` ahead of the consumer."""
    import queue
    import threading

    q = queue.Queue(maxsize=depth)
    threading.Thread(target=lambda: [q.put(x) for x in source], daemon=True).start()
    while True:
        yield q.get()


def _produce(kind: str, ms: float, q) -> None:
    for x in loader(kind, ms):
        q.put(x)


def ahead_in_process(kind: str, ms: float, depth: int = DEPTH):
    """The batches of loader(kind, ms) made in a child process (spawned: JAX's threads are running here), `depth`
    ahead of the consumer, through a multiprocessing queue (the shape of Grain's or PyTorch's worker loaders)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.Queue(maxsize=depth)
    ctx.Process(target=_produce, args=(kind, ms, q), daemon=True).start()
    while True:
        yield q.get()


def timed(step, p, source, n: int) -> tuple[list[float], dict]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        p, loss = step(p, next(source))
        loss.block_until_ready()
        out.append((time.perf_counter() - t0) * 1e3)
    return out, p


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loader", choices=("wait", "numpy", "python", "none"), required=True)
    ap.add_argument("--ms", type=float, default=5.0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=8, help="truth: blocks of each kind (half before, half after)")
    ap.add_argument("--block", type=int, default=10)
    ap.add_argument("--probe", action="store_true", help="StepTimer(probe=True): the measured what-if")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--thread", action="store_true", help="the loader runs ahead in a background thread")
    where.add_argument("--process", action="store_true", help="the loader runs ahead in a child process")
    ap.add_argument("--no-python-tracer", action="store_true", help="capture without JAX's Python tracer")
    ap.add_argument("--bare", action="store_true", help="no StepTimer: jax.profiler.start_trace/stop_trace and a "
                    "StepTraceAnnotation around the step only, the batch fetched before it (between the markers)")
    a = ap.parse_args()
    step, p = make_step()
    real, base = loader(a.loader, a.ms), next(loader("none", 0))
    real = ahead(real) if a.thread else ahead_in_process(a.loader, a.ms) if a.process else real
    cached = itertools.repeat(base)  # the same batch every step, from memory
    _, p = timed(step, p, real, 3)  # compile, off the clock
    T, Tc, halves = [], [], []

    # a block's first step is left out; with --thread also the batches the loader queued during the cached block
    settle = 1 + (DEPTH if a.thread or a.process else 0)

    def blocks(n):
        nonlocal p
        t, tc = [], []
        for _ in range(n):
            r, p = timed(step, p, real, a.block + settle - 1)
            c, p = timed(step, p, cached, a.block + settle - 1)
            t += r[settle:]
            tc += c[settle:]
        T.extend(t)
        Tc.extend(tc)
        halves.append(1 - statistics.fmean(tc) / statistics.fmean(t))

    blocks(a.rounds - a.rounds // 2)
    logdir = os.path.join(a.out, f"{a.loader}-{a.ms:g}" + ("-thread" if a.thread else "-process" if a.process else ""))
    options = None
    if a.no_python_tracer:
        options = jax.profiler.ProfileOptions()
        options.python_tracer_level = 0
    if a.bare:  # the loop as JAX's docs mark it: the step annotated, the `for` pulling the batch outside it
        for i in range(a.steps):
            if i == 20:
                jax.profiler.start_trace(logdir, profiler_options=options)
            batch = next(real)
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                p, loss = step(p, batch)
                loss.block_until_ready()
            if i == 29:
                jax.profiler.stop_trace()
        timer = None
    else:
        timer = StepTimer(logdir, profile_steps="20:30", probe=a.probe, total_steps=a.steps,
                          profiler_options=options)
    last = None
    for _ in range(a.steps if timer else 0):
        timer.probe(step, p, last)  # with --probe: a block on a copy of p where the plan puts one (else nothing)
        with timer.step() as s:
            last = next(real)
            p, loss = step(p, last)
            s.result = loss
    if timer:
        timer.probe(step, p)  # a block planned after the last step
        timer.close()
    blocks(a.rounds // 2)
    t, tc = statistics.fmean(T), statistics.fmean(Tc)
    print(json.dumps({"loader": a.loader + ("-thread" if a.thread else "-process" if a.process else ""), "ms": a.ms,
                      "truth": max(0.0, (t - tc) / t), "T_ms": t, "T_c_ms": tc,
                      "halves": halves, "logdir": logdir, "step_file": str(timer.step_file) if timer else None,
                      "probe": timer.what_if if timer else None, "checksum": float(sum(jnp.sum(v) for v in p.values())),
                      "load": os.getloadavg()[0]}), flush=True)


if __name__ == "__main__":
    main()
