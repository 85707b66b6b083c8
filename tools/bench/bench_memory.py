"""Where a BERT train step's memory goes (issue 17): what the backward pass keeps, live tensors vs RSS.

    python tools/bench/bench_memory.py --size base --batch 32 [--remat] [--steps 2] [--stock-gelu]

1. Traces the real train step (train/step.py) for a synthetic pretraining batch (seq 128, 20 masked positions,
   vocab 8,000 — the default data's shape) and lists the forward tensors its backward pass reads
   (train/memory.py `kept_for_backward`), by op type and by layer-independent name.
2. With --steps N > 0, runs N steps and prints after each: RSS and its high-water mark (/proc/self/status) and
   TF's own count of live tensor bytes on the CPU and its peak (tf.config.experimental.get_memory_info), so
   RSS − live shows what the allocator holds beyond the tensors.
--stock-gelu builds the model with keras.activations.gelu (autodiff of tf.nn.gelu) instead of model/lowmem.py's
hand-differentiated one, for the side-by-side figure.
--time-remat N: instead, builds the model twice (plain, train.remat) and times N rounds of one step each, taking
turns in one process, and prints the median step times and their ratio (what recomputation costs).
"""

from __future__ import annotations

import argparse
import time
from types import SimpleNamespace


def _status() -> tuple[int, int]:
    with open("/proc/self/status") as f:
        d = dict(line.split(":", 1) for line in f if ":" in line)
    return int(d["VmRSS"].split()[0]), int(d["VmHWM"].split()[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="base")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--remat", action="store_true")
    ap.add_argument("--stock-gelu", action="store_true")
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--time-remat", type=int, default=0, metavar="N")
    a = ap.parse_args()
    import keras
    import numpy as np
    import tensorflow as tf

    from tfbertperf.model import bert
    from tfbertperf.model.build import build_model
    from tfbertperf.train.memory import kept_for_backward, state_bytes, traced_graph
    from tfbertperf.train.optimizer import make_optimizer
    from tfbertperf.train.step import make_train_step

    B, T, P, V = a.batch, 128, 20, 8000
    if a.stock_gelu:
        bert.gelu = lambda x: keras.activations.gelu(x, approximate=False)

    def build(remat):
        model = build_model(SimpleNamespace(size=a.size, task="pretrain", init="", dropout=0.1), V, T, P,
                                 remat=remat)
        opt = make_optimizer(SimpleNamespace(learning_rate=1e-4, precision="float32"), model.trainable_variables)
        return model, opt, make_train_step(model, opt, tf.distribute.get_strategy(), "pretrain")

    model, opt, step = build(a.remat)
    rng = np.random.default_rng(0)
    batch = {"input_ids": rng.integers(0, V, (B, T)), "input_mask": np.ones((B, T), "int64"),
             "segment_ids": np.zeros((B, T), "int64"), "masked_lm_positions": rng.integers(0, T, (B, P)),
             "masked_lm_ids": rng.integers(0, V, (B, P)), "masked_lm_weights": np.ones((B, P), "float32"),
             "next_sentence_labels": np.zeros((B, 1), "int64")}
    batch = {k: tf.constant(v) for k, v in batch.items()}
    if a.time_remat:
        _time_remat(step, build(True)[2], batch, a)
        return
    kept = kept_for_backward(traced_graph(step, {k: tf.TensorSpec(v.shape, v.dtype) for k, v in batch.items()}))
    MiB = 2**20
    print(f"BERT-{a.size} batch {B}{' remat' if a.remat else ''}{' stock-gelu' if a.stock_gelu else ''}: "
          f"kept for backward {kept['bytes'] / MiB:,.0f} MiB in {kept['tensors']} tensors; "
          f"weights + gradients + optimizer {state_bytes(model, opt) / MiB:,.0f} MiB")
    for name, size in list(kept["by_op"].items())[:8]:
        print(f"  by op    {name:40s} {size / MiB:9,.1f} MiB")
    for name, size in list(kept["by_name"].items())[:12]:
        print(f"  by name  {name[-70:]:70s} {size / MiB:9,.1f} MiB")
    for i in range(a.steps):
        t = time.perf_counter()
        loss = float(step(batch).numpy()[0])
        rss, hwm = _status()
        live = tf.config.experimental.get_memory_info("CPU:0")
        print(f"step {i}: {time.perf_counter() - t:.1f} s, loss {loss:.3f}; RSS {rss:,} KiB (peak {hwm:,} KiB); "
              f"live tensors {live['current'] // 1024:,} KiB (peak {live['peak'] // 1024:,} KiB)", flush=True)


def _time_remat(plain, remat, batch, a) -> None:
    import statistics

    times = {"plain": [], "remat": []}
    for fn in (plain, remat):  # trace both first
        fn(batch).numpy()
    for _ in range(a.time_remat):
        for name, fn in (("plain", plain), ("remat", remat)):
            t = time.perf_counter()
            fn(batch).numpy()
            times[name].append((time.perf_counter() - t) * 1e3)
    p, r = statistics.median(times["plain"]), statistics.median(times["remat"])
    print(f"BERT-{a.size} batch {a.batch}, {a.time_remat} rounds taking turns: median step {p:.1f} ms plain, "
          f"{r:.1f} ms train.remat: remat / plain = {r / p:.3f}")


if __name__ == "__main__":
    main()
