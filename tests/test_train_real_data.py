"""Loss falls on the data stage's real shards (WordPiece-tokenized English from pydoc_data), for both tasks."""

import math

import pytest

from tfbertperf.config import load_config
from tfbertperf.data.manifest import load_manifest, shard_uris
from tfbertperf.data.pipeline import build_dataset
from tfbertperf.data import prepare_data
from tfbertperf.storage import open_backend, open_shards
from tfbertperf.train.loop import train


@pytest.mark.slow
@pytest.mark.parametrize("task", ["pretrain", "classify"])
def test_loss_falls_on_real_prepared_shards(tmp_path, task):
    cfg = load_config(overrides={
        "model.task": task, "data.uri": str(tmp_path / "data"), "data.seq_len": 64, "data.max_predictions": 10,
        "data.vocab_size": 2000, "data.num_shards": 2, "data.dupe_factor": 1, "train.batch_size": 16,
        "train.steps": 60, "train.learning_rate": 5e-4 if task == "pretrain" else 1e-3, "train.warmup_steps": 2, "profile.steps": "none",
        "profile.probe_steps": 0,
        # Deterministic data order and ops: the same losses on every run (train.seed alone did not fix the order of
        # parallel reads), so a pass here is a pass in CI. Without it the classify fit stalled at the constant guess
        # (ln 2) in one CI run (final 0.72 vs first 0.66).
        "train.deterministic": True,
    })
    prepare_data(cfg, progress=False)
    backend = open_backend(cfg.data.uri, cfg.data)
    manifest = load_manifest(cfg.data.uri, backend)

    uris, hint = shard_uris(cfg, manifest, backend)
    sources = []

    def dataset_fn(ctx=None):
        sources.append(open_shards(uris, cfg.data, backend, record_bytes_hint=hint))
        ds = build_dataset(cfg, manifest, sources[-1], ctx)
        # Classification from scratch (no pretrained weights) generalises slowly on the built-in same-topic
        # pairs; fitting 4 real batches shows model + loss + optimizer work within a test's budget.
        return ds.take(4).cache().repeat() if task == "classify" else ds

    try:
        result = train(cfg, dataset_fn, int(manifest["vocab_size"]), None, progress=None)
    finally:
        for s in sources:
            s.close()
    losses = [loss for _, loss in result.loss_trajectory]
    assert all(math.isfinite(x) for x in losses)
    first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    # pretrain starts near ln(vocab) + ln(2), classify near ln(2); both must clearly drop
    assert last < (0.85 if task == "pretrain" else 0.7) * first, (first, last)
