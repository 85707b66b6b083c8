#!/usr/bin/env python3
"""Storage benchmark on the local emulators; prints markdown tables (paste into BENCHMARKS.md).

1. Stream-mode efficiency: MB/s the stream reader delivers into tf.data (ranged SDK reads + TFRecord framing
   with both CRC checks + records as string tensors, shards interleaved) ÷ a raw SDK download of the same blobs
   (whole-blob downloads on the same number of threads, bytes discarded) — same emulator, alternating, best of
   N each.  Goal ≥ 0.8.  Also shown: the same stream handed on as single records (what a pipeline shuffles),
   and local TFRecordDataset doing the same — tf.data's per-element cost, paid by every TFRecord reader.
2. stream vs stage vs local examples/s through the real input pipeline (tfbertperf.data.pipeline, tuned
   preset, batch 32) at 0 and 20 ms of injected per-request latency: the fault proxy in front of
   fake-gcs-server for the remote modes (at 0 ms too, so only the latency differs), the local backend's own
   emulated latency for local disk.  All reads use 256 KiB requests, the local backend's read size.

    python tools/bench/bench_storage.py            # ~5 min on 2 cores
    python tools/bench/bench_storage.py --quick    # smaller data, fewer repeats (a smoke run)
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def log(msg: str) -> None:
    print(f"bench_storage: {msg}", file=sys.stderr, flush=True)


def write_shards(d: str, n_shards: int, mb_per_shard: float) -> int:
    """TFRecord shards of ~1.5 KB records (the size of a seq_len 128 pretraining example); returns bytes."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    total = 0
    for s in range(n_shards):
        p = os.path.join(d, f"raw-{s:05d}.tfrecord")
        with tf.io.TFRecordWriter(p) as w:
            written = 0
            while written < mb_per_shard * 1e6:
                rec = rng.bytes(int(rng.integers(1200, 1800)))
                w.write(rec)
                written += len(rec) + 16
        total += os.path.getsize(p)
    return total


def raw_download_s(backend, uris: list[str], threads: int) -> float:
    """Seconds to download every blob whole with the SDK (no parsing), `threads` at a time."""
    if backend.name == "gcs":
        def get(u):
            return len(backend.bucket.blob(backend._name(u)).download_as_bytes(raw_download=True, checksum=None))
    else:
        def get(u):
            return len(backend.container.download_blob(backend._name(u), max_concurrency=1).readall())
    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        n = sum(pool.map(get, uris))
    assert n > 0
    return time.perf_counter() - t0


def stream_read_s(backend, uris: list[str], data_cfg, threads: int, per_record: bool) -> float:
    """Seconds to read every record of the shards into tf.data in stream mode, shards interleaved.

    per_record=False: interleave the per-chunk record batches (`ShardSource.read_batches`) — the reader's own
    cost: ranged reads + framing/CRC checks + records as tensors.  per_record=True: interleave single records
    (`ShardSource.read`, what a pipeline shuffles) — adds tf.data's per-element cost, which any TFRecord reader
    pays (see local_read_s)."""
    from tfbertperf.storage import open_shards

    src = open_shards(uris, data_cfg, backend)
    if per_record:
        ds = src.filenames.interleave(src.read, cycle_length=threads, num_parallel_calls=threads,
                                      deterministic=False).batch(1024)
    else:
        ds = src.filenames.interleave(src.read_batches, cycle_length=threads, num_parallel_calls=threads,
                                      deterministic=False)
    t0 = time.perf_counter()
    n = sum(int(b.shape[0]) for b in ds)
    s = time.perf_counter() - t0
    src.close()
    assert n > 0
    return s


def local_read_s(paths: list[str], threads: int) -> float:
    """Seconds for TFRecordDataset to read the same shards from local disk (page cache), single records
    through the same interleave: the per-element floor of any TFRecord pipeline."""
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensor_slices(paths).interleave(
        lambda f: tf.data.TFRecordDataset(f, buffer_size=256 * 1024), cycle_length=threads,
        num_parallel_calls=threads, deterministic=False).batch(1024)
    t0 = time.perf_counter()
    n = sum(int(b.shape[0]) for b in ds)
    assert n > 0
    return time.perf_counter() - t0


def part1(args, tmp: str, gcs, az) -> list[str]:
    from tfbertperf.config import DataConfig
    from tfbertperf.storage import open_backend
    from tfbertperf.storage.upload import upload_dir

    d = os.path.join(tmp, "raw")
    os.makedirs(d)
    total = write_shards(d, args.shards, args.shard_mb)
    paths = sorted(os.path.join(d, f) for f in os.listdir(d))
    log(f"part 1: {args.shards} shards, {total / 1e6:.0f} MB")
    cfg = DataConfig(mode="stream", chunk_mb=args.chunk_mb, concurrency=args.threads)
    rows = ["| emulator | raw SDK download MB/s | stream reader MB/s | **stream ÷ raw** | stream, single records "
            "MB/s | local TFRecordDataset, single records MB/s |", "|---|---|---|---|---|---|"]
    for label, uri in (("fake-gcs-server (gs://)", "gs://bench/raw"), ("Azurite (az://)", "az://bench/raw")):
        upload_dir(d, uri, cfg, progress=False)
        b = open_backend(uri, cfg)
        uris = [o.uri for o in b.list(uri)]
        runs = {"raw": [], "stream": [], "records": [], "local": []}
        raw_download_s(b, uris, args.threads)  # warm connections and the emulator's caches
        stream_read_s(b, uris, cfg, args.threads, per_record=False)  # and tf.data's function tracing
        for _ in range(args.repeats):  # alternate so drift in machine load hits all alike
            runs["raw"].append(raw_download_s(b, uris, args.threads))
            runs["stream"].append(stream_read_s(b, uris, cfg, args.threads, per_record=False))
            runs["records"].append(stream_read_s(b, uris, cfg, args.threads, per_record=True))
            runs["local"].append(local_read_s(paths, args.threads))
        mbs = {k: total / 1e6 / min(v) for k, v in runs.items()}
        log(f"{label}: " + ", ".join(f"{k} {v:.0f} MB/s" for k, v in mbs.items())
            + f" (seconds: {({k: [round(x, 3) for x in v] for k, v in runs.items()})})")
        rows.append(f"| {label} | {mbs['raw']:.0f} | {mbs['stream']:.0f} | **{mbs['stream'] / mbs['raw']:.2f}** | "
                    f"{mbs['records']:.0f} | {mbs['local']:.0f} |")
    return rows


def examples_per_s(cfg, manifest, source, batches: int) -> float:
    from tfbertperf.data.pipeline import build_dataset

    it = iter(build_dataset(cfg, manifest, source))
    for _ in range(3):  # warm-up: first shards opened, autotune settles
        next(it)
    t0 = time.perf_counter()
    for _ in range(batches):
        next(it)
    return batches * cfg.train.batch_size / (time.perf_counter() - t0)


def part2(args, tmp: str, gcs) -> list[str]:
    from tfbertperf.config import load_config
    from tfbertperf.data.manifest import load_manifest
    from tfbertperf.data import prepare_data
    from tfbertperf.storage import open_backend, open_shards
    from tfbertperf.testing.proxy import FaultProxy
    from tfbertperf.storage.upload import upload_dir

    small = [f"data.dupe_factor={args.dupe}", "data.num_shards=8", "data.vocab_size=2000",
             "train.batch_size=32", "data.chunk_mb=0.25", f"data.concurrency={args.threads}", "data.lookahead=4"]
    local = os.path.join(tmp, "pretrain")
    prepare_data(load_config(sets=small), local, progress=False)
    upload_dir(local, "gs://bench/pretrain", load_config(sets=small).data, progress=False)
    rows = ["| injected latency | local disk ex/s | stream ex/s | stage ex/s | stream ÷ local | stage ÷ local |",
            "|---|---|---|---|---|---|"]
    for latency in (0, 20):
        res = {}
        for mode in ("local", "stream", "stage"):
            vals = []
            for _ in range(args.repeats):
                if mode == "local":
                    cfg = load_config(data_uri=local, sets=small + [f"data.read_latency_ms={latency}"])
                    b = open_backend(local, cfg.data)
                    manifest = load_manifest(local, b)
                    src = open_shards([b.join(local, s["name"]) for s in manifest["shards"]], cfg.data, b,
                                      int(manifest["record_bytes_mean"]))
                    vals.append(examples_per_s(cfg, manifest, src, args.batches))
                    src.close()
                    continue
                with FaultProxy(gcs.url, latency_ms=latency) as proxy:
                    os.environ["STORAGE_EMULATOR_HOST"] = proxy.url
                    cfg = load_config(data_uri="gs://bench/pretrain", sets=small + [f"data.mode={mode}"])
                    b = open_backend(cfg.data.uri, cfg.data)
                    manifest = load_manifest(cfg.data.uri, b)
                    src = open_shards([b.join(cfg.data.uri, s["name"]) for s in manifest["shards"]], cfg.data, b,
                                      int(manifest["record_bytes_mean"]))
                    vals.append(examples_per_s(cfg, manifest, src, args.batches))
                    src.close()
                    os.environ["STORAGE_EMULATOR_HOST"] = gcs.url
            res[mode] = max(vals)
            log(f"latency {latency} ms, {mode}: {res[mode]:.0f} ex/s (runs {[round(v) for v in vals]})")
        rows.append(f"| {latency} ms | {res['local']:.0f} | {res['stream']:.0f} | {res['stage']:.0f} | "
                    f"{res['stream'] / res['local']:.2f} | {res['stage'] / res['local']:.2f} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small data, 1 repeat (smoke run)")
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--shard-mb", type=float, default=12.0)
    ap.add_argument("--chunk-mb", type=float, default=8.0, help="part 1 stream chunk (data.chunk_mb)")
    ap.add_argument("--threads", type=int, default=4, help="download threads = data.concurrency = cycle_length")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dupe", type=int, default=3, help="part 2 data.dupe_factor")
    ap.add_argument("--batches", type=int, default=60, help="part 2 timed batches per measurement")
    args = ap.parse_args()
    if args.quick:
        args.shards, args.shard_mb, args.repeats, args.dupe, args.batches = 4, 4.0, 1, 1, 20

    from tfbertperf.testing.emulators import Azurite, FakeGcs

    tmp = tempfile.mkdtemp(prefix="tfbertperf-bench-storage-")
    t0 = time.perf_counter()
    try:
        with FakeGcs(tls=False) as gcs, Azurite() as az:
            os.environ.update(gcs.env())
            os.environ.update(az.env())
            gcs.create_bucket("bench")
            az.create_container("bench")
            rows1 = part1(args, tmp, gcs, az)
            rows2 = part2(args, tmp, gcs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    import platform

    print(f"### Storage (tools/bench/bench_storage.py{' --quick' if args.quick else ''}; {os.cpu_count()} cores, "
          f"{platform.python_version()}, {time.perf_counter() - t0:.0f} s)\n")
    print(f"Stream mode vs raw SDK download ({args.shards} shards × {args.shard_mb} MB, {args.threads} threads, "
          f"chunk {args.chunk_mb} MB, best of {args.repeats}):\n")
    print("\n".join(rows1))
    print(f"\nInput pipeline examples/s (pretrain seq 128, batch 32, 256 KiB requests, best of {args.repeats}):\n")
    print("\n".join(rows2))


if __name__ == "__main__":
    main()
