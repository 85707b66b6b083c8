"""Backend and shard-source factory: chosen by URI scheme (adding a backend is adding one module)."""

from __future__ import annotations

from tfbertperf.errors import UsageError
from tfbertperf.redact import redact_text
from tfbertperf.storage.base import Backend, ShardSource, split_uri


def open_backend(uri: str, data_cfg=None) -> Backend:
    """Return the backend for `uri` ('', a path, file://, gs://, az://).  `data_cfg` (DataConfig) supplies the
    emulated-latency knobs for local data."""
    scheme, _, _ = split_uri(uri)
    if scheme == "file":
        from tfbertperf.storage.local import LocalBackend

        lat = getattr(data_cfg, "read_latency_ms", 0.0) if data_cfg is not None else 0.0
        bw = getattr(data_cfg, "read_bandwidth_mbps", 0.0) if data_cfg is not None else 0.0
        return LocalBackend(lat, bw)
    if scheme == "gs":
        from tfbertperf.storage.gcs import GCSBackend  # noqa: F401  (added by the cloud-storage issue)

        return GCSBackend(uri, data_cfg)
    if scheme == "az":
        from tfbertperf.storage.azure import AzureBackend  # noqa: F401

        return AzureBackend(uri, data_cfg)
    raise UsageError(f"{redact_text(uri)}: unknown URI scheme {scheme!r} (use a path, file://, gs:// or az://)")


def open_shards(uris: list[str], data_cfg, backend: Backend, record_bytes_hint: int = 2048,
                hashes: dict[str, str] | None = None, compression: str = "none") -> ShardSource:
    """The ShardSource for `data_cfg.mode` on `backend` (local files: always 'local').

    `hashes` ({uri: sha256}, data/manifest.py shard_hashes): stage mode checks every shard it downloads against
    them; the other modes hash every shard first when data.verify=sha256 (storage/integrity.py verify_hashes).
    `compression`: none | gzip (every shard the same; data/described.py finds it).
    """
    mode = getattr(data_cfg, "mode", "stream")
    if getattr(data_cfg, "verify", "none") == "sha256" and not (backend.name != "local" and mode == "stage"):
        from tfbertperf.storage.integrity import verify_hashes

        verify_hashes(backend, uris, hashes or {}, bool(getattr(data_cfg, "skip_corrupt", False)))
    if backend.name == "local":
        return backend.shard_source(uris, record_bytes_hint=record_bytes_hint,
                                    skip_corrupt=bool(getattr(data_cfg, "skip_corrupt", False)),
                                    compression=compression)
    if mode == "local":
        mode = "stream"
    if mode == "stage":
        return backend.shard_source(uris, mode=mode, data_cfg=data_cfg, record_bytes_hint=record_bytes_hint,
                                    hashes=hashes, compression=compression)
    return backend.shard_source(uris, mode=mode, data_cfg=data_cfg, record_bytes_hint=record_bytes_hint,
                                compression=compression)
