"""The user's own TFRecords vs the same records prepared by us: same pipeline, same storage, side by side.

A small pretraining set is prepared by tfbertperf (manifest, our shard names); its records are then written again
the way google-research/bert's create_pretraining_data.py writes them (tf.train.Example of int64 / float lists)
under the user's names (wiki_00.tfrecord, part-r-00001 …) in a folder without a manifest.  Both are read by the
same code path (data.uri → storage backend → tf.data pipeline); the user's is described from its records.

Two figures, taken in turns (ours, theirs, ours, theirs …) so that a shared VM's drift hits both, each pair's
ratio theirs / ours reported (median and min–max over the pairs):
  pipeline  examples/s of the input pipeline alone (the run's tuned pipeline, --batches batches after a warm-up)
  training  examples/s of a short profiled-off training run (tiny BERT, --steps steps; job.run)

    python tools/bench/bench_your_data.py --reps 5 --train-reps 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

PREP = ["data.dupe_factor=1", "data.num_shards=4", "data.vocab_size=2000"]


def _as_google_research(ours_dir: str, theirs_dir: str, shard_uris: list[str]) -> None:
    """Each of our shards' records re-written as create_pretraining_data.py writes them, under other names."""
    import collections

    import tensorflow as tf

    os.makedirs(theirs_dir, exist_ok=True)
    names = ["wiki_00.tfrecord", "wiki_01.tfrecord", "part-r-00001", "part-r-00002"]
    for k, uri in enumerate(shard_uris):
        with tf.io.TFRecordWriter(os.path.join(theirs_dir, names[k % len(names)] + ("" if k < 4 else f".{k}"))) as w:
            for rec in tf.data.TFRecordDataset(uri):
                ex = tf.train.Example.FromString(rec.numpy()).features.feature
                f = collections.OrderedDict()
                for key in ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids"):
                    f[key] = tf.train.Feature(int64_list=tf.train.Int64List(value=list(ex[key].int64_list.value)))
                f["masked_lm_weights"] = tf.train.Feature(
                    float_list=tf.train.FloatList(value=list(ex["masked_lm_weights"].float_list.value)))
                f["next_sentence_labels"] = tf.train.Feature(
                    int64_list=tf.train.Int64List(value=list(ex["next_sentence_labels"].int64_list.value)))
                w.write(tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString())


def _pipeline_rate(uri: str, batches: int, sets: list[str]) -> float:
    """examples/s of the run's tuned input pipeline alone, `batches` batches after 10 of warm-up."""
    from tfbertperf.config import load_config
    from tfbertperf.data.pipeline import build_dataset
    from tfbertperf.job import Inputs
    from tfbertperf.storage import open_shards

    inputs = Inputs(load_config(data_uri=uri, sets=PREP + sets), progress=False)
    src = open_shards(inputs.shard_uris, inputs.cfg.data, inputs.backend, inputs.record_bytes_hint,
                      inputs.hashes, compression=inputs.compression)
    it = iter(build_dataset(inputs.cfg, inputs.manifest, src))
    for _ in range(10):
        next(it)
    t0 = time.perf_counter()
    for _ in range(batches):
        next(it)
    rate = batches * inputs.cfg.train.batch_size / (time.perf_counter() - t0)
    src.close()
    return rate


def _training_rate(uri: str, runs: str, steps: int, sets: list[str]) -> float:
    """examples/s of a short training run (report.json throughput: steady steps only)."""
    from tfbertperf.config import load_config
    from tfbertperf.job import run

    cfg = load_config(data_uri=uri, sets=PREP + [f"train.steps={steps}", "profile.steps=none", "profile.probe_steps=0",
                                                 "profile.ceiling_seconds=0", "profile.utilization_hz=0",
                                                 f"run.out={runs}", *sets])
    return float(run(cfg, progress=False)[1]["throughput"]["examples_per_sec"])


def _pairs(name: str, ours: list[float], theirs: list[float]) -> str:
    ratios = [t / o for o, t in zip(ours, theirs)]
    return (f"{name:<9} ours {statistics.median(ours):8.1f} examples/s  theirs {statistics.median(theirs):8.1f}"
            f"  theirs/ours per pair: median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max "
            f"{max(ratios):.3f}; {len(ratios)} pairs)")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5, help="pipeline pairs")
    ap.add_argument("--batches", type=int, default=300, help="batches timed per pipeline measurement")
    ap.add_argument("--train-reps", type=int, default=3, help="training-run pairs (0 = none)")
    ap.add_argument("--steps", type=int, default=40, help="steps per training run")
    ap.add_argument("--out", default="", help="work folder (default: a temporary one)")
    a = ap.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from tfbertperf.config import load_config
    from tfbertperf.data import prepare_data
    from tfbertperf.job import Inputs

    work = a.out or tempfile.mkdtemp(prefix="bench-your-data-")
    ours, theirs = os.path.join(work, "ours"), os.path.join(work, "theirs")
    if not os.path.isfile(os.path.join(ours, "manifest.json")):
        prepare_data(load_config(sets=PREP), ours, progress=False)
    inputs = Inputs(load_config(data_uri=ours, sets=PREP), progress=False)
    if not os.path.isdir(theirs):
        _as_google_research(ours, theirs, inputs.shard_uris)
    print(f"ours:   {inputs.manifest['num_examples']} examples, {len(inputs.shard_uris)} shards at {ours}")
    t = Inputs(load_config(data_uri=theirs, sets=PREP), progress=False)
    print(f"theirs: {t.manifest['records_checked']} examples, {t.manifest['files']} files at {theirs} "
          f"({t.manifest['format']}, vocab {t.manifest['vocab_source']})")
    with open("/proc/loadavg") as f:
        print(f"load average before: {f.read().split()[:3]}")
    # the same model on both sides: the user's set told our vocabulary (else its size is inferred from the ids)
    cells = (("ours", ours, []), ("theirs", theirs, [f"data.vocab={os.path.join(ours, 'vocab.txt')}"]))
    pipe = {"ours": [], "theirs": []}
    _pipeline_rate(ours, 50, []), _pipeline_rate(theirs, 50, cells[1][2])  # warm the page cache and tf.data
    for _ in range(a.reps):
        for k, uri, sets in cells:
            pipe[k].append(_pipeline_rate(uri, a.batches, sets))
    print(_pairs("pipeline", pipe["ours"], pipe["theirs"]))
    if a.train_reps:
        train = {"ours": [], "theirs": []}
        for _ in range(a.train_reps):
            for k, uri, sets in cells:
                train[k].append(_training_rate(uri, os.path.join(work, "runs"), a.steps, sets))
        print(_pairs("training", train["ours"], train["theirs"]))
    with open("/proc/loadavg") as f:
        print(f"load average after: {f.read().split()[:3]}")


if __name__ == "__main__":
    main()
