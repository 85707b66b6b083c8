"""The tf.data input pipeline: shards → batched feature dicts, every knob from RunConfig.pipeline.

    filenames ─(shuffle shard order, seeded)→ interleave(source.read, cycle_length, num_parallel_calls,
    deterministic) → shuffle(shuffle_buffer, seed=train.seed) → repeat → batch(global batch, drop_remainder)
    → parse_example (vectorized, after batch) [→ FastBertTokenizer for tokenize=inline] → cast int64→int32
    → prefetch [→ prefetch_to_device(first GPU, device_prefetch) when pipeline.device_prefetch > 0 and a GPU is
    visible; a no-op on a CPU-only host]
With `pipeline.data_service` on, every stage before the prefetch runs on the tf.data service (data/service.py).

With `pipeline.cache=memory|disk` the parsed batches of the first pass are cached (cache after parse, before
repeat) and later passes shuffle whole batches (buffer shuffle_buffer / batch) instead of examples.

Presets.  `tuned` (default) takes every knob as set (AUTOTUNE by default; cycle_length "autotune" reads
min(shards, AUTO_CYCLE_LENGTH) files concurrently, see there).  `naive` is what a first attempt
often looks like: sequential reads (cycle_length 1, no parallel calls), per-example parse before batching, no
prefetch; tf.data's automatic map parallelization / prefetch injection are switched off so it stays naive.
Presets set *defaults*: an explicit `--set pipeline.<knob>=v` that differs from the built-in default wins over
the preset (RunConfig cannot tell "explicit" from "default", so a value equal to the built-in default counts as
unset — e.g. `--set pipeline.prefetch=autotune` does not undo naive's prefetch 0; use a number instead).
`effective_pipeline(cfg)` returns the resolved knobs (report them).

Knob meanings: "autotune" → tf.data.AUTOTUNE; num_parallel_calls 1 → sequential (in the consumer's thread,
no worker threads); prefetch 0 → no prefetch; shuffle_buffer 0 → no shuffle, "autotune" → 1024 examples (at
least 4 batches).

Output element: dict of [batch, …] tensors — input_ids, input_mask, segment_ids int32 [B, seq_len]; pretrain
also masked_lm_positions, masked_lm_ids int32 [B, max_predictions], masked_lm_weights float32
[B, max_predictions], next_sentence_labels int32 [B, 1]; classify also label_ids int32 [B].
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import uuid
from dataclasses import fields

from tfbertperf.config import AUTOTUNE, PipelineConfig
from tfbertperf.data.features import CLASSIFY_KEYS, PRETRAIN_KEYS, feature_spec, text_feature_spec
from tfbertperf.data.manifest import check_compatible
from tfbertperf.data.service import distribute, plain_source
from tfbertperf.data.service import enabled as service_enabled

NAIVE = {"cycle_length": 1, "num_parallel_calls": 1, "prefetch": 0, "parse_after_batch": False}
AUTO_SHUFFLE_EXAMPLES = 1024
AUTO_CYCLE_LENGTH = 4
"""cycle_length "autotune" → min(shards, 4) files read concurrently.  Not tf.data.AUTOTUNE: with
num_parallel_calls AUTOTUNE too, TF 2.21 on this 2-core VM read one file at a time (8 files of 2,000 elements:
the first 6,000 came from files 0, 1, 2 in turn — the naive preset's order, so `tuned` and `naive` trained on
identical batches; issue 17).  Four is tf.data's own example ("Preprocess 4 files concurrently") and the
remote modes' default data.concurrency; each reader holds one read buffer (or stream chunk)."""


def resolve_cycle_length(value, num_files: int) -> int:
    """The interleave's cycle_length in force for `num_files` files: "autotune" → min(num_files,
    AUTO_CYCLE_LENGTH) (at least 1); a number → at most num_files (an interleave cannot read more files at once
    than there are: 16 over 8 shards reads 8; effective_pipeline notes it)."""
    if value == AUTOTUNE:
        return max(1, min(int(num_files), AUTO_CYCLE_LENGTH))
    return max(1, min(int(value), int(num_files)))


def effective_pipeline(cfg, num_files: int | None = None) -> dict:
    """The pipeline knobs in force: the preset's defaults, overridden by values that differ from the built-in
    defaults; `deterministic` is also on when train.deterministic is; given the number of shard files, the
    cycle_length as resolved (resolve_cycle_length)."""
    p = cfg.pipeline
    eff = {f.name: getattr(p, f.name) for f in fields(PipelineConfig)}
    if p.preset == "naive":
        builtin = PipelineConfig()
        for k, v in NAIVE.items():
            if getattr(p, k) == getattr(builtin, k):
                eff[k] = v
    eff["deterministic"] = bool(p.deterministic or cfg.train.deterministic)
    if num_files is not None:
        asked, eff["cycle_length"] = eff["cycle_length"], resolve_cycle_length(eff["cycle_length"], num_files)
        if asked != AUTOTUNE and int(asked) > eff["cycle_length"]:
            eff["cycle_length_note"] = (f"pipeline.cycle_length {asked} over {num_files} shard files: "
                                        f"{eff['cycle_length']} files are read at once (one per shard)")
    return eff


def runs_ahead(cfg) -> bool:
    """Whether the input pipeline has stages that work in the background (prefetch, parallel map or interleave,
    storage read-ahead) and so keeps filling buffers while the training loop is busy elsewhere."""
    eff = effective_pipeline(cfg)
    return (eff["prefetch"] != 0 or eff["num_parallel_calls"] != 1 or eff["cycle_length"] != 1
            or (cfg.data.mode == "stage" and cfg.data.lookahead > 0))


def _tf_knob(v):
    import tensorflow as tf

    return tf.data.AUTOTUNE if v == AUTOTUNE else int(v)


def _parallel(v):
    """num_parallel_calls: 1 means sequential (None), not 'one worker thread'."""
    import tensorflow as tf

    if v == AUTOTUNE:
        return tf.data.AUTOTUNE
    return None if int(v) <= 1 else int(v)


def output_keys(task: str) -> tuple[str, ...]:
    return PRETRAIN_KEYS if task == "pretrain" else CLASSIFY_KEYS


def _cast(features: dict, task: str) -> dict:
    """int64 → int32 (what the model's embeddings and losses take); floats stay float32; only model keys."""
    import tensorflow as tf

    return {
        k: (tf.cast(features[k], tf.int32) if features[k].dtype == tf.int64 else features[k])
        for k in output_keys(task)
    }


def _segment_tokens(tokenizer, text, ranges):
    """Tokenize a [B] string batch and keep each row's token slice ranges[b] = [start, stop) → ragged [B, (n)]."""
    import tensorflow as tf

    tokens = tokenizer.tokenize(text)  # ragged [B, (tokens)] int64
    lo, hi = ranges[:, 0], ranges[:, 1]
    idx = tf.ragged.range(lo, hi)  # [B, (hi - lo)] positions within each row
    flat = idx.values + tf.repeat(tokens.row_starts(), idx.row_lengths())
    return tf.RaggedTensor.from_row_splits(tf.gather(tokens.values, flat), idx.row_splits)


def inline_features(parsed: dict, tokenizer, *, task: str, seq_len: int, cls_id: int, sep_id: int) -> dict:
    """Raw-text records (features.text_feature_spec, batched) → the pre-tokenized feature dict (int64).

    Tokenizes text_a / text_b with `tokenizer` (FastBertTokenizer, as prepare does), keeps the recorded token
    slices, assembles [CLS] A [SEP] B [SEP] (no B, no second [SEP] when b_range is empty), pads to seq_len,
    and for pretraining writes masked_lm_replace at the masked positions (the 80/10/10 choice recorded at
    preparation, so the result is deterministic and equals the pre-tokenized record).
    """
    import tensorflow as tf

    a = _segment_tokens(tokenizer, parsed["text_a"], parsed["a_range"])
    b = _segment_tokens(tokenizer, parsed["text_b"], parsed["b_range"])
    n = tf.shape(parsed["text_a"], out_type=tf.int64)[0]
    cls = tf.RaggedTensor.from_tensor(tf.fill([n, 1], tf.constant(cls_id, tf.int64)))
    sep = tf.RaggedTensor.from_tensor(tf.fill([n, 1], tf.constant(sep_id, tf.int64)))
    has_b = tf.cast(parsed["b_range"][:, 1] > parsed["b_range"][:, 0], tf.int64)
    sep_b = tf.RaggedTensor.from_row_lengths(tf.fill([tf.reduce_sum(has_b)], tf.constant(sep_id, tf.int64)), has_b)
    ids = tf.concat([cls, a, sep, b, sep_b], axis=1)
    seg = tf.concat([tf.zeros_like(cls), tf.zeros_like(a), tf.zeros_like(sep), tf.ones_like(b), tf.ones_like(sep_b)],
                    axis=1)
    out = {
        "input_ids": ids.to_tensor(0, shape=[None, seq_len]),
        "input_mask": tf.ones_like(ids).to_tensor(0, shape=[None, seq_len]),
        "segment_ids": seg.to_tensor(0, shape=[None, seq_len]),
    }
    if task == "pretrain":
        real = tf.cast(parsed["masked_lm_weights"] > 0, tf.int64)[:, :, None]
        hit = tf.one_hot(parsed["masked_lm_positions"], seq_len, dtype=tf.int64) * real  # [B, P, S]
        masked = tf.reduce_max(hit, axis=1) > 0  # [B, S]
        value = tf.reduce_sum(hit * parsed["masked_lm_replace"][:, :, None], axis=1)
        out["input_ids"] = tf.where(masked, value, out["input_ids"])
        for k in ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights", "next_sentence_labels"):
            out[k] = parsed[k]
    else:
        out["label_ids"] = parsed["label_ids"]
    return out


def make_decoder(cfg, manifest: dict, vocab=None, *, batched: bool):
    """serialized records → model feature dict.  `batched`: input is a [B] string tensor (vectorized
    parse_example) or a scalar (parse_single_example).  Inline tokenization needs `vocab` (token list)."""
    import tensorflow as tf

    task = manifest["task"]
    seq_len, max_pred = int(manifest["seq_len"]), int(manifest["max_predictions"])
    if cfg.pipeline.tokenize != "inline":
        spec = feature_spec(task, seq_len, max_pred)

        def decode(serialized):
            parse = tf.io.parse_example if batched else tf.io.parse_single_example
            return _cast(parse(serialized, spec), task)

        return decode

    from tfbertperf.data.vocab import make_tokenizer, special_ids

    tokenizer = make_tokenizer(vocab)
    ids = special_ids(vocab)
    spec = text_feature_spec(task, max_pred)

    def decode_inline(serialized):
        if batched:
            parsed = tf.io.parse_example(serialized, spec)
        else:
            parsed = {k: tf.expand_dims(v, 0) for k, v in tf.io.parse_single_example(serialized, spec).items()}
        out = inline_features(parsed, tokenizer, task=task, seq_len=seq_len, cls_id=ids["[CLS]"], sep_id=ids["[SEP]"])
        if not batched:
            out = {k: v[0] for k, v in out.items()}
        return _cast(out, task)

    return decode_inline


def build_dataset(cfg, manifest: dict, source, input_context=None, *, training: bool = True, service=None):
    """The training input pipeline (see the module docstring for stages, presets and knob meanings).

    Args:
      cfg: RunConfig (pipeline.*, train.batch_size, train.seed, train.deterministic).
      manifest: from `tfbertperf.data.manifest.load_manifest` (task, seq_len, shards, "uri").
      source: a tfbertperf.storage ShardSource over the shards `manifest.shard_uris(cfg, …)` names (raw-text
        shards when pipeline.tokenize=inline).
      input_context: a tf.distribute.InputContext (distribute_datasets_from_function): the shard list is split
        by input pipeline and batches are per-replica; None = global batches of train.batch_size.
      training: shuffle (shard order and examples) and repeat forever; False = one ordered pass.
      service: the run's data/service_session.ServiceSession when pipeline.data_service is on (job names, the
        trainer's tally); the stages before the prefetch then run on the tf.data service (data/service.py).
    Returns:
      tf.data.Dataset of feature dicts (int32 ids, float32 weights), batch dimension static.
    """
    import tensorflow as tf

    check_compatible(cfg, manifest)
    eff = effective_pipeline(cfg)
    on_service = service_enabled(cfg)
    if on_service:  # the workers run TF's own reader: no Python callbacks on the service (data/service.py)
        source = plain_source(source)
    inline = eff["tokenize"] == "inline"
    seed = int(cfg.train.seed)
    batch = int(cfg.train.batch_size)
    shards = manifest.get("text_shards" if inline else "shards") or manifest["shards"]
    filenames = source.filenames
    num_files = len(shards)
    by_record = None  # (pipelines, this one): fewer files than input pipelines, so each takes every n-th record
    if input_context is not None:
        batch = input_context.get_per_replica_batch_size(batch)
        n_pipes = input_context.num_input_pipelines
        if n_pipes > 1 and not on_service and num_files < n_pipes:
            by_record = (n_pipes, input_context.input_pipeline_id)  # e.g. one user file, two workers
        elif n_pipes > 1 and not on_service:  # on the service, trainers share a job
            filenames = filenames.shard(n_pipes, input_context.input_pipeline_id)
            num_files = -(-num_files // n_pipes)
    if training:
        filenames = filenames.shuffle(max(1, len(shards)), seed=seed, reshuffle_each_iteration=True)

    vocab = None
    if inline:
        from tfbertperf.data.manifest import load_vocab

        vocab = load_vocab(manifest, source.backend)

    par = _parallel(eff["num_parallel_calls"])
    # Stream sources can hand over whole chunks (a 1-D tensor of records each): far fewer elements through the
    # interleave, unbatched after it.  With one shard at a time the record order is the same either way; with
    # several, chunks interleave differently from records, so a deterministic pipeline (which promises the same
    # order from every backend and mode) takes records.
    cycle = resolve_cycle_length(eff["cycle_length"], num_files)
    by_chunk = getattr(source, "read_batches", None) is not None and (cycle == 1 or not eff["deterministic"])
    ds = filenames.interleave(
        source.read_batches if by_chunk else source.read,
        cycle_length=cycle,
        block_length=1,
        num_parallel_calls=par,
        deterministic=eff["deterministic"] if par is not None else None,
    )
    if by_chunk:
        ds = ds.unbatch()
    if by_record is not None:
        ds = ds.shard(*by_record)
    shuffle = eff["shuffle_buffer"]
    if shuffle == AUTOTUNE:
        shuffle = max(AUTO_SHUFFLE_EXAMPLES, 4 * batch)
    shuffle = int(shuffle) if training else 0
    if shuffle > 0:
        ds = ds.shuffle(shuffle, seed=seed, reshuffle_each_iteration=True)

    cache = eff["cache"]
    if training and cache == "none":
        ds = ds.repeat()

    if eff["parse_after_batch"]:
        ds = ds.batch(batch, drop_remainder=True)
        ds = ds.map(make_decoder(cfg, manifest, vocab, batched=True), num_parallel_calls=par,
                    deterministic=eff["deterministic"] if par is not None else None)
    else:
        ds = ds.map(make_decoder(cfg, manifest, vocab, batched=False), num_parallel_calls=par,
                    deterministic=eff["deterministic"] if par is not None else None)
        ds = ds.batch(batch, drop_remainder=True)

    if cache != "none":
        if cache == "memory":
            ds = ds.cache()
        else:
            d = tempfile.mkdtemp(prefix="tfbertperf-cache-")
            atexit.register(shutil.rmtree, d, True)  # the cache lives as long as this process
            ds = ds.cache(os.path.join(d, f"cache-{uuid.uuid4().hex[:8]}"))
        if training:
            if shuffle > 0:
                ds = ds.shuffle(max(1, shuffle // batch), seed=seed, reshuffle_each_iteration=True)
            ds = ds.repeat()

    opts = tf.data.Options()
    opts.deterministic = eff["deterministic"]
    opts.autotune.enabled = True
    if cfg.pipeline.preset == "naive" or par is None:
        # Otherwise tf.data would quietly parallelize the sequential map and batch.
        opts.experimental_optimization.map_parallelization = False
        opts.experimental_optimization.parallel_batch = False
    if eff["prefetch"] == 0:
        opts.experimental_optimization.inject_prefetch = False
    if on_service:  # the split point: the stages above run on the service's workers
        ds = distribute(ds.with_options(opts), cfg, session=service)
    if eff["prefetch"] != 0:
        ds = ds.prefetch(_tf_knob(eff["prefetch"]))
    ds = ds.with_options(opts)
    gpus = tf.config.list_logical_devices("GPU") if eff["device_prefetch"] > 0 and input_context is None else []
    if gpus:  # host→device copies overlap the step (must be the last transformation; strategies' distributed
        # datasets already fetch to the device: InputOptions.experimental_fetch_to_device defaults to True)
        ds = ds.apply(tf.data.experimental.prefetch_to_device(gpus[0].name, buffer_size=eff["device_prefetch"]))
    return ds


def element_spec(task: str, batch_size: int | None, seq_len: int, max_predictions: int) -> dict:
    """tf.TensorSpec of each key of a pipeline element."""
    import tensorflow as tf

    spec = {k: tf.TensorSpec([batch_size, seq_len], tf.int32) for k in ("input_ids", "input_mask", "segment_ids")}
    if task == "pretrain":
        spec["masked_lm_positions"] = tf.TensorSpec([batch_size, max_predictions], tf.int32)
        spec["masked_lm_ids"] = tf.TensorSpec([batch_size, max_predictions], tf.int32)
        spec["masked_lm_weights"] = tf.TensorSpec([batch_size, max_predictions], tf.float32)
        spec["next_sentence_labels"] = tf.TensorSpec([batch_size, 1], tf.int32)
    else:
        spec["label_ids"] = tf.TensorSpec([batch_size], tf.int32)
    return spec
