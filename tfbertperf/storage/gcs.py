"""Google Cloud Storage backend (google-cloud-storage SDK).

Credentials: Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS, `gcloud auth application-default
login`, or the GCE metadata server); anonymous when STORAGE_EMULATOR_HOST points at an emulator.  The SDK's own
retries are off (retry=None) so that every retry is ours and counted in `metrics`.
"""

from __future__ import annotations

import os

from tfbertperf.errors import UsageError
from tfbertperf.redact import redact_text
from tfbertperf.storage.base import ObjectInfo, ShardSource, split_uri
from tfbertperf.storage.remote import RemoteBackend, TransientError, network_failure

SHA256_KEY = "tfbertperf-sha256"  # object metadata written by upload, read by checksum (idempotent uploads)
NATIVE_BUFFER = 8 * 1024 * 1024  # TFRecordDataset's read buffer in native mode (one "request" of records)
_HTTP_POOL = 64  # connections kept to the service (default 10 would serialize wide interleaves)


def _status(exc: BaseException) -> int | None:
    code = getattr(exc, "code", None)
    if isinstance(code, int):
        return code
    resp = getattr(exc, "response", None)
    code = getattr(resp, "status_code", None)
    return code if isinstance(code, int) else None


class GCSBackend(RemoteBackend):
    name = "gcs"
    SHA256_KEY = SHA256_KEY

    def __init__(self, uri: str, data_cfg=None) -> None:
        super().__init__(uri, data_cfg)
        scheme, self.bucket_name, _ = split_uri(uri)
        if not self.bucket_name:
            raise UsageError(f"{self.shown_uri}: no bucket in the URI (expected gs://BUCKET/PREFIX)")
        self.emulator = os.environ.get("STORAGE_EMULATOR_HOST", "")
        self.client = self._client()
        self.bucket = self.client.bucket(self.bucket_name)
        self.call(f"gs://{self.bucket_name}", self._check_bucket)

    # ---- connection -------------------------------------------------------------------------------------
    def _client(self):
        from google.cloud import storage

        if self.emulator:
            from google.auth.credentials import AnonymousCredentials

            client = storage.Client(project="tfbertperf-emulator", credentials=AnonymousCredentials())
        else:
            import google.auth
            from google.auth.exceptions import DefaultCredentialsError, GoogleAuthError

            try:
                creds, project = google.auth.default(scopes=["https://www.googleapis.com/auth/devstorage.read_write"])
            except DefaultCredentialsError:
                raise UsageError(
                    f"{self.shown_uri}: no Google Cloud credentials found (set GOOGLE_APPLICATION_CREDENTIALS, run "
                    "`gcloud auth application-default login`, or set STORAGE_EMULATOR_HOST for an emulator)"
                ) from None
            except GoogleAuthError as e:
                raise UsageError(f"{self.shown_uri}: Google Cloud credentials rejected ({redact_text(str(e))})") from None
            client = storage.Client(project=project, credentials=creds)
        import requests.adapters

        adapter = requests.adapters.HTTPAdapter(pool_connections=_HTTP_POOL, pool_maxsize=_HTTP_POOL, max_retries=0)
        client._http.mount("https://", adapter)
        client._http.mount("http://", adapter)
        return client

    def _check_bucket(self):
        from google.api_core.exceptions import NotFound

        try:
            self.bucket.reload(retry=None)
        except NotFound:
            raise UsageError(f"gs://{self.bucket_name}: no such bucket") from None

    def _classify(self, exc: BaseException, what: str) -> BaseException:
        from google.auth.exceptions import GoogleAuthError

        shown = redact_text(what)
        if isinstance(exc, GoogleAuthError):
            return UsageError(f"{shown}: Google Cloud credentials rejected ({redact_text(str(exc)).splitlines()[0]})")
        if isinstance(exc, TransientError):
            return exc
        code = _status(exc)
        if code is None:  # connection refused/reset, broken chunked body, timeout: the network, not the request
            if isinstance(exc, (OSError, ConnectionError)) or "requests" in type(exc).__module__ or \
                    "urllib3" in type(exc).__module__ or "resumable_media" in type(exc).__module__:
                return network_failure(exc, shown)
            return exc
        if code in (408, 429) or code >= 500:
            return TransientError(f"HTTP {code}")
        if code == 404:
            return UsageError(f"{shown}: not found")
        if code in (401, 403):
            return UsageError(f"{shown}: access denied by Google Cloud Storage (HTTP {code}); check the credentials")
        return UsageError(f"{shown}: Google Cloud Storage error HTTP {code}")

    # ---- interface --------------------------------------------------------------------------------------
    def _name(self, uri: str) -> str:
        scheme, bucket, path = split_uri(uri)
        if scheme != "gs" or bucket != self.bucket_name:
            raise UsageError(f"{redact_text(uri)}: not in gs://{self.bucket_name}")
        return path

    def list(self, prefix_uri: str) -> list[ObjectInfo]:
        prefix = self._name(prefix_uri)

        def once():
            return [ObjectInfo(f"gs://{self.bucket_name}/{b.name}", int(b.size or 0))
                    for b in self.client.list_blobs(self.bucket_name, prefix=prefix or None, retry=None)]

        return sorted(self.call(prefix_uri, once), key=lambda o: o.uri)

    def _object(self, uri: str):
        name = self._name(uri)
        return self.call(uri, lambda: self.bucket.get_blob(name, retry=None))

    def stat(self, uri: str) -> ObjectInfo:
        blob = self._object(uri)
        if blob is None:
            raise UsageError(f"{redact_text(uri)}: no such object")
        return ObjectInfo(uri, int(blob.size or 0))

    def _read_range(self, uri: str, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        from google.api_core.exceptions import from_http_response

        blob = self.bucket.blob(self._name(uri))
        # One ranged media GET on the SDK's authorized session, body read in a single call: download_as_bytes
        # copies the body through 8 KiB Python iterations, and that GIL time is taken from the TFRecord parser
        # running beside it.  Identity encoding: bytes as stored (no decompressive transcoding).
        resp = self.client._http.get(blob._get_download_url(self.client), stream=True,
                                     timeout=(self.connect_timeout_s, self.read_timeout_s),
                                     headers={"Range": f"bytes={start}-{start + length - 1}",
                                              "Accept-Encoding": "identity"})
        try:
            if resp.status_code == 416:  # range starts at/after the end of the object
                return b""
            if resp.status_code not in (200, 206):
                raise from_http_response(resp)
            return resp.raw.read(decode_content=False)
        finally:
            resp.close()

    def upload(self, local_path: str, uri: str, sha256: str | None = None) -> None:
        name = self._name(uri)

        def once():
            blob = self.bucket.blob(name)
            if sha256:
                blob.metadata = {SHA256_KEY: sha256}
            blob.upload_from_filename(local_path, retry=None)

        self.call(uri, once)
        self.metrics.count("uploaded_bytes", os.path.getsize(local_path))

    # ---- native mode ------------------------------------------------------------------------------------
    def _native_source(self, uris: list[str], record_bytes_hint: int, data_cfg=None,
                       compression: str = "none") -> ShardSource:
        """TF's gs:// filesystem reads the shards (TFRecordDataset on the URIs), counted as TF's reader delivers
        records (storage/tfreader.py).  With data.skip_corrupt, damaged shards are found first (through the SDK)
        and read by our skipping parser (storage/integrity.py)."""
        import tensorflow as tf

        from tfbertperf.storage.tfrecord import COMPRESSION_TYPES
        from tfbertperf.storage.tfreader import counted_record_batches

        ctype = COMPRESSION_TYPES[compression]
        for u in uris:
            self._name(u)
        metrics = self.metrics
        per_read = max(1, NATIVE_BUFFER // max(1, int(record_bytes_hint)))

        def groups(filename):  # groups of per_read records: fewer elements through the interleave
            return counted_record_batches(filename, metrics, per_read=per_read, buffer_size=NATIVE_BUFFER,
                                          compression_type=ctype)

        def read(filename):
            return groups(filename).unbatch()

        read_batches = groups
        if getattr(data_cfg if data_cfg is not None else self.data_cfg, "skip_corrupt", False):
            from tfbertperf.storage.integrity import corrupt_shards, skipping_read

            damaged = set(corrupt_shards(self, list(uris), compression))
            if damaged:
                read, read_batches = skipping_read(self, damaged, read, chunk_bytes=NATIVE_BUFFER,
                                                   compression=compression), None
        return ShardSource(tf.data.Dataset.from_tensor_slices(list(uris)), read, self, "native",
                           read_batches=read_batches, compression=ctype)
