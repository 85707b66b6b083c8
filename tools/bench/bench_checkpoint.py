"""What a checkpoint costs (train.checkpoint_every): the time of one atomic save (model, optimizer, dropout seeds,
tf.data iterator with its shuffle buffer; train/checkpoint.py) next to the time of one training step, measured
side by side in one process on the same batches, as a ratio (the machine's speed drifts; the ratio travels).

    python tools/bench/bench_checkpoint.py [--sizes tiny,mini] [--steps 12] [--saves 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def measure(size: str, steps: int, saves: int, data_dir: str) -> dict:
    import tensorflow as tf

    from tfbertperf.config import load_config
    from tfbertperf.data.pipeline import build_dataset
    from tfbertperf.job import Inputs
    from tfbertperf.model import build_model
    from tfbertperf.storage import open_shards
    from tfbertperf.train.checkpoint import Checkpointer
    from tfbertperf.train.optimizer import make_optimizer
    from tfbertperf.train.step import make_train_step

    cfg = load_config(data_uri=data_dir, sets=["data.dupe_factor=1", "data.num_shards=4", "data.vocab_size=2000",
                                               f"model.size={size}", "train.batch_size=8"])
    inputs = Inputs(cfg, progress=False)
    source = open_shards(inputs.shard_uris, cfg.data, inputs.backend, record_bytes_hint=inputs.record_bytes_hint)
    it = iter(build_dataset(cfg, inputs.manifest, source, None))
    model = build_model(cfg.model, int(inputs.manifest["vocab_size"]), cfg.data.seq_len, cfg.data.max_predictions)
    opt = make_optimizer(cfg.train, model.trainable_variables)
    step = make_train_step(model, opt, tf.distribute.get_strategy(), cfg.model.task, jit=False)
    with tempfile.TemporaryDirectory() as d:
        ck = Checkpointer(d, 1, model, opt, it)
        step_ms, save_ms = [], []
        for i in range(steps + saves):
            t0 = time.perf_counter()
            step(next(it)).numpy()
            t1 = time.perf_counter()
            if i >= 2:
                step_ms.append((t1 - t0) * 1e3)
            if i >= steps:  # saves interleaved with steps, after warm-up
                ck.save(i + 1, {"losses": []})
                save_ms.append((time.perf_counter() - t1) * 1e3)
        mb = sum(f.stat().st_size for f in (Path(d) / "checkpoints").rglob("*") if f.is_file()) / 2 / 1e6
    source.close()
    return {"size": size, "step_ms": statistics.median(step_ms), "save_ms": statistics.median(save_ms),
            "checkpoint_mb": mb}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="tiny,mini")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--saves", type=int, default=5)
    a = ap.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from tfbertperf.config import load_config
    from tfbertperf.data import prepare_data

    with tempfile.TemporaryDirectory() as d:
        prepare_data(load_config(sets=["data.dupe_factor=1", "data.num_shards=4", "data.vocab_size=2000"]), d,
                     progress=False)
        print("| model | median step ms | median save ms | save ÷ step | checkpoint MB |")
        print("|---|---|---|---|---|")
        for size in a.sizes.split(","):
            r = measure(size, a.steps, a.saves, d)
            print(f"| {size} | {r['step_ms']:.1f} | {r['save_ms']:.1f} | {r['save_ms'] / r['step_ms']:.2f} | "
                  f"{r['checkpoint_mb']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
