"""Shared loop for the foreign test programs (image_augment.py, text_tokenize.py): a user's own custom training
loop with step markers, profiled over a window, and the what-if truth from alternating blocks in one process.

A program supplies `make_dataset(kind)` (kind "pipeline": its real input pipeline; "memory": one batch of it
repeated from memory, the compute-only feed) and `make_step()` (a compiled train step taking the batch's
elements).  Modes: "profiled" (writes a profile to OUT/profiled, prints step and wait means) and "truth"
(alternating pipeline / memory blocks, no profile: (T − T_c) / T).  One JSON line per mode on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np


def keras_step(tf, model):
    """The compiled SGD train step of a classifier with logits: step(x, y) -> loss."""
    opt = tf.keras.optimizers.SGD(0.01)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    return step


def run_profiled(tf, make_dataset, make_step, logdir: str, steps: int, window: tuple[int, int]) -> dict:
    step = make_step()
    it = iter(make_dataset("pipeline"))
    step_ms, wait_ms = [], []
    start, stop = window
    for i in range(steps):
        if i == start:
            tf.profiler.experimental.start(logdir)
        t0 = time.perf_counter()
        with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
            batch = next(it)
            t1 = time.perf_counter()
            step(*batch).numpy()
        t2 = time.perf_counter()
        if i == stop - 1:
            tf.profiler.experimental.stop()
        if i >= start:
            step_ms.append((t2 - t0) * 1e3)
            wait_ms.append((t1 - t0) * 1e3)
    return {"mode": "profiled", "logdir": logdir, "steps": len(step_ms), "step_time_ms": float(np.mean(step_ms)),
            "input_wait_ms": float(np.mean(wait_ms))}


def what_if_truth(make_dataset, make_step, blocks: int = 6, block_steps: int = 16, settle: int = 6) -> dict:
    """Blocks fed by the pipeline alternate with blocks fed from memory (one process, so load changes hit both);
    the first `settle` steps of each block are dropped (buffers refilled during the other block); medians."""
    step = make_step()
    its = {"pipeline": iter(make_dataset("pipeline")), "memory": iter(make_dataset("memory"))}
    times = {"pipeline": [], "memory": []}
    for b in range(blocks + 1):
        for kind, it in its.items():
            for i in range(block_steps):
                t0 = time.perf_counter()
                step(*next(it)).numpy()
                if b > 0 and i >= settle:
                    times[kind].append((time.perf_counter() - t0) * 1e3)
    T, T_c = float(np.median(times["pipeline"])), float(np.median(times["memory"]))
    return {"mode": "truth", "step_time_ms": T, "compute_only_step_ms": T_c, "input_cost_fraction": (T - T_c) / T}


def main(tf, make_dataset, make_step, doc: str, argv=None) -> None:
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--modes", default="profiled,truth")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--window", default="20:35")
    a = p.parse_args(argv)
    start, stop = (int(v) for v in a.window.split(":"))
    for mode in a.modes.split(","):
        if mode == "truth":
            res = what_if_truth(make_dataset, make_step)
        else:
            res = run_profiled(tf, make_dataset, make_step, os.path.join(a.out, mode), a.steps, (start, stop))
        print(json.dumps(res), flush=True)
