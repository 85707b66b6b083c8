"""Storage: URI → backend (local | gcs | azure) with list/stat/read-range/upload and per-request metrics, and
the shard sources that feed tf.data in each read mode.  Knows nothing of models.

    backend = open_backend(uri)              # chosen by URI scheme
    source  = open_shards(shard_uris, data_cfg, backend)   # ShardSource for the pipeline's interleave
"""

from tfbertperf.storage.base import Backend, ObjectInfo, ShardSource, StorageMetrics, split_uri  # noqa: F401
from tfbertperf.storage.factory import open_backend, open_shards  # noqa: F401
