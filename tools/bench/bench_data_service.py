"""The tf.data service on one box: input ceiling and training throughput for pipeline.data_service = off / local:1 /
local:2 on a CPU-heavy pipeline (pipeline.tokenize=inline: FastBertTokenizer + masking per batch), side by side,
rounds alternating in order (off, local:1, local:2, off, …) so that the machine's drift hits all alike.

Per setting: the input ceiling (data/ceiling.py on the run's own pipeline: the service's workers + the transfer to
the trainer), the training examples/s (a real run: BERT-tiny, no profile), the bytes of one element (a batch of
int32/float32 features: what crosses the wire each element), and the service's cost per element with one worker
((1/ceiling local:1 − 1/ceiling off) per batch: serialization + loopback gRPC + the hand-over between processes).
Medians with the (min–max) range of the rounds; the machine's cores and load printed with them.

    PYTHONPATH=. python tools/bench/bench_data_service.py --rounds 3 --steps 40 --seconds 3
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
SETTINGS = ("off", "local:1", "local:2")


def _fmt(xs: list[float], digits: int = 0) -> str:
    return f"{statistics.median(xs):,.{digits}f} ({min(xs):,.{digits}f}–{max(xs):,.{digits}f})"


def ceiling(cfg, inputs, seconds: float) -> tuple[float, int]:
    """(examples/s, bytes of one element) of cfg's pipeline alone, through the service when it is on."""
    from tfbertperf.data.ceiling import measure_ceiling
    from tfbertperf.data.pipeline import build_dataset
    from tfbertperf.data.service_session import ServiceSession
    from tfbertperf.storage import open_shards

    session = ServiceSession(cfg, inputs.manifest.get("num_examples")).start(cfg)
    sources = []
    try:
        def make():
            src = open_shards(inputs.shard_uris, cfg.data, inputs.backend, inputs.record_bytes_hint)
            sources.append(src)
            return build_dataset(session.config(cfg), inputs.manifest, src, service=session)

        batch = next(iter(make()))
        nbytes = sum(int(v.numpy().nbytes) for v in batch.values())
        rate = measure_ceiling(make, seconds)["examples_per_sec"]
    finally:
        for s in sources:
            s.close()
        session.stop()
    return rate, nbytes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40, help="training steps per run (0: ceilings only)")
    ap.add_argument("--seconds", type=float, default=3.0, help="ceiling span")
    ap.add_argument("--batch", type=int, default=32)
    a = ap.parse_args(argv)

    from tfbertperf import job
    from tfbertperf.config import load_config

    out = tempfile.mkdtemp(prefix="bench-dsvc-")
    base = ["pipeline.tokenize=inline", f"train.batch_size={a.batch}", f"train.steps={max(a.steps, 12)}",
            "profile.steps=none", "profile.probe_steps=0", "profile.ceiling_seconds=0", "profile.utilization_hz=0",
            f"run.out={out}"]
    cfgs = {s: load_config(sets=base + [f"pipeline.data_service={s}"]) for s in SETTINGS}
    inputs = job.Inputs(cfgs["off"], progress=False)
    got = {s: {"ceiling": [], "train": [], "bytes": 0} for s in SETTINGS}
    print(f"host: {os.cpu_count()} cores (os.cpu_count), shared with other work; load {os.getloadavg()}", flush=True)
    for rnd in range(1, a.rounds + 1):
        for s in SETTINGS:
            rate, nbytes = ceiling(cfgs[s], inputs, a.seconds)
            got[s]["ceiling"].append(rate)
            got[s]["bytes"] = nbytes
            line = f"round {rnd} {s:8s} ceiling {rate:9,.0f} ex/s"
            if a.steps:
                cfg = dataclasses.replace(cfgs[s], run=dataclasses.replace(cfgs[s].run, name=f"{s.replace(':', '')}"))
                _, rep = job.run(cfg, progress=False)
                got[s]["train"].append(rep["throughput"]["examples_per_sec"])
                line += f"  training {got[s]['train'][-1]:7,.1f} ex/s"
            print(line + f"  load {os.getloadavg()[0]:.1f}", flush=True)
    off = statistics.median(got["off"]["ceiling"])
    print(f"\n| setting | input ceiling ex/s | × off | training ex/s | × off | element bytes |")
    print("|---|---|---|---|---|---|")
    for s in SETTINGS:
        c = got[s]["ceiling"]
        t = got[s]["train"]
        tr = f"{_fmt(t, 1)} | {statistics.median(t) / statistics.median(got['off']['train']):.2f}" if t else "– | –"
        print(f"| {s} | {_fmt(c)} | {statistics.median(c) / off:.2f} | {tr} | {got[s]['bytes']:,} |")
    one = statistics.median(got["local:1"]["ceiling"])
    per_batch_ms = (1.0 / one - 1.0 / off) * a.batch * 1e3
    elem = got["local:1"]["bytes"]
    print(f"\nservice cost per element (batch of {a.batch}, {elem:,} bytes) with one worker: {per_batch_ms:.2f} ms "
          f"({per_batch_ms * 1e3 / max(1, elem) * 1e3:.1f} ns/byte) — serialization + loopback gRPC + hand-over")
    return 0


if __name__ == "__main__":
    sys.exit(main())
