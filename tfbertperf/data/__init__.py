"""data stage (see shared/DESIGN.md): corpus → WordPiece vocab → pretraining / classification examples →
TFRecord shards (+ upload), and the tf.data pipeline that reads them back.

    manifest = prepare_data(cfg, out_uri)                    # data.prep      (also `tfbertperf prepare`)
    manifest = load_manifest(uri, backend)                   # data.manifest  (UsageError naming what is wrong)
    uris, record_bytes = shard_uris(cfg, manifest, backend)  # pre-tokenized or raw-text shards (tokenize=inline)
    ds = build_dataset(cfg, manifest, open_shards(uris, cfg.data, backend, record_bytes))   # data.pipeline

Write side: prep/ (every data set is made there, one path; see its __init__).  Shared by both sides: corpus
(the bundled text → documents of sentences), vocab (WordPiece learning, FastBertTokenizer), pretrain
(google-research/bert create_pretraining_data's algorithm), classify (TSV/CSV and the built-in pair task).
Read side: features (on-disk feature specs), manifest, pipeline, ceiling; tokcheck (parity with transformers'
tokenizer; the report's tokenizer block).
TensorFlow is imported lazily, inside functions.
"""

from tfbertperf.data.manifest import load_manifest, shard_uris  # noqa: F401
from tfbertperf.data.pipeline import build_dataset, effective_pipeline, element_spec  # noqa: F401
from tfbertperf.data.synthetic import synthetic_batch  # noqa: F401
from tfbertperf.data.prep import prepare_data  # noqa: F401
