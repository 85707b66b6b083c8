"""Azure Blob Storage backend (azure-storage-blob SDK).

URI: `az://CONTAINER/PREFIX`, optionally with a SAS token as its query (`az://c/p?sv=…&sig=…`; the token is
taken out of the URI at once, used as the credential, and never echoed).  The account comes from
AZURE_STORAGE_CONNECTION_STRING (Azurite: its well-known devstoreaccount1 string), or AZURE_STORAGE_ACCOUNT_URL
with AZURE_STORAGE_KEY or AZURE_STORAGE_SAS_TOKEN (or the SAS in the URI).  The SDK's retry policy is off
(retry_total=0) so that every retry is ours and counted in `metrics`.
"""

from __future__ import annotations

import os

from tfbertperf.errors import UsageError
from tfbertperf.redact import redact_text
from tfbertperf.storage.base import ObjectInfo, split_uri
from tfbertperf.storage.remote import RemoteBackend, TransientError, network_failure

SHA256_KEY = "tfbertperf_sha256"  # blob metadata (names must be C# identifiers) written by upload
_HTTP_POOL = 64

_CRED_HELP = ("set AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT_URL with AZURE_STORAGE_KEY or "
              "AZURE_STORAGE_SAS_TOKEN")


def _strip_query(uri: str) -> tuple[str, str]:
    """('az://c/p?sv=..&sig=..') → ('az://c/p', 'sv=..&sig=..')."""
    base, _, query = uri.partition("?")
    return base, query


class AzureBackend(RemoteBackend):
    name = "azure"
    SHA256_KEY = SHA256_KEY

    def __init__(self, uri: str, data_cfg=None) -> None:
        super().__init__(uri, data_cfg)
        base, sas_in_uri = _strip_query(uri)
        _, self.container_name, _ = split_uri(base)
        self.uri = base  # the SAS stays in the credential only
        if not self.container_name:
            raise UsageError(f"{self.shown_uri}: no container in the URI (expected az://CONTAINER/PREFIX)")
        self.service = self._service(sas_in_uri)
        self.container = self.service.get_container_client(self.container_name)
        self.call(f"az://{self.container_name}", self._check_container)

    # ---- connection -------------------------------------------------------------------------------------
    def _service(self, sas_in_uri: str):
        import requests
        import requests.adapters
        from azure.core.pipeline.transport import RequestsTransport
        from azure.storage.blob import BlobServiceClient

        session = requests.Session()
        adapter = requests.adapters.HTTPAdapter(pool_connections=_HTTP_POOL, pool_maxsize=_HTTP_POOL, max_retries=0)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        kw = dict(retry_total=0, transport=RequestsTransport(session=session, session_owner=False),
                  connection_timeout=self.connect_timeout_s, read_timeout=self.read_timeout_s,
                  # bodies are read in blocks of this size; the 4 KiB default costs a Python iteration per 4 KiB
                  connection_data_block_size=4 * 1024 * 1024)
        conn = os.environ.get("AZURE_STORAGE_CONNECTION_STRING", "")
        url = os.environ.get("AZURE_STORAGE_ACCOUNT_URL", "")
        sas = sas_in_uri or os.environ.get("AZURE_STORAGE_SAS_TOKEN", "")
        key = os.environ.get("AZURE_STORAGE_KEY", "")
        try:
            if conn and not sas_in_uri:
                return BlobServiceClient.from_connection_string(conn, **kw)
            if url:
                if sas:
                    from azure.core.credentials import AzureSasCredential

                    return BlobServiceClient(url, credential=AzureSasCredential(sas.lstrip("?")), **kw)
                if key:
                    return BlobServiceClient(url, credential=key, **kw)
            elif conn and sas_in_uri:  # account from the connection string, credential from the URI's SAS
                from azure.core.credentials import AzureSasCredential

                probe = BlobServiceClient.from_connection_string(conn)
                return BlobServiceClient(probe.url, credential=AzureSasCredential(sas_in_uri), **kw)
        except ValueError as e:
            raise UsageError(f"{self.shown_uri}: Azure Storage settings are malformed ({redact_text(str(e))})") from None
        raise UsageError(f"{self.shown_uri}: no Azure Storage account or credentials configured ({_CRED_HELP})")

    def _check_container(self):
        from azure.core.exceptions import ResourceNotFoundError

        # One page of one blob name, not get_container_properties: a container-scoped SAS (read+list) may list
        # but may not read container properties.
        try:
            next(iter(self.container.list_blobs(results_per_page=1).by_page()), None)
        except ResourceNotFoundError:
            raise UsageError(f"az://{self.container_name}: no such container in account "
                             f"{self.service.account_name}") from None

    def _classify(self, exc: BaseException, what: str) -> BaseException:
        from azure.core.exceptions import AzureError, ClientAuthenticationError, HttpResponseError

        shown = redact_text(what)
        if isinstance(exc, TransientError):
            return exc
        code = getattr(exc, "status_code", None)
        if isinstance(exc, ClientAuthenticationError) or code in (401, 403):
            return UsageError(f"{shown}: Azure Storage rejected the credentials (HTTP {code or 403}; {_CRED_HELP})")
        if isinstance(exc, HttpResponseError) and isinstance(code, int):
            if code in (408, 429) or code >= 500:
                return TransientError(f"HTTP {code}")
            if code == 404:
                return UsageError(f"{shown}: not found")
            return UsageError(f"{shown}: Azure Storage error HTTP {code}")
        if isinstance(exc, (AzureError, OSError, ConnectionError)) or "requests" in type(exc).__module__ or \
                "urllib3" in type(exc).__module__:
            return network_failure(exc, shown)  # connection refused/reset, truncated body, timeout, DNS
        return exc

    # ---- interface --------------------------------------------------------------------------------------
    def _name(self, uri: str) -> str:
        base, _ = _strip_query(uri)
        scheme, container, path = split_uri(base)
        if scheme != "az" or container != self.container_name:
            raise UsageError(f"{redact_text(uri)}: not in az://{self.container_name}")
        return path

    def join(self, prefix_uri: str, name: str) -> str:
        return _strip_query(prefix_uri)[0].rstrip("/") + "/" + name

    def list(self, prefix_uri: str) -> list[ObjectInfo]:
        prefix = self._name(prefix_uri)

        def once():
            return [ObjectInfo(f"az://{self.container_name}/{b.name}", int(b.size or 0))
                    for b in self.container.list_blobs(name_starts_with=prefix or None)]

        return sorted(self.call(prefix_uri, once), key=lambda o: o.uri)

    def _object(self, uri: str):
        from azure.core.exceptions import ResourceNotFoundError

        name = self._name(uri)

        def once():
            try:
                return self.container.get_blob_client(name).get_blob_properties()
            except ResourceNotFoundError:
                return None

        return self.call(uri, once)

    def stat(self, uri: str) -> ObjectInfo:
        p = self._object(uri)
        if p is None:
            raise UsageError(f"{redact_text(uri)}: no such blob")
        return ObjectInfo(_strip_query(uri)[0], int(p.size))

    def _read_range(self, uri: str, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        from azure.core.exceptions import HttpResponseError
        from azure.core.rest import HttpRequest

        blob = self.container.get_blob_client(self._name(uri))
        # One plain ranged GET through the client's pipeline (auth, headers), not download_blob: its downloader
        # retries truncated bodies by itself (3 tries, 1 s sleeps), which would hide retries from our metrics.
        req = HttpRequest("GET", blob.url, headers={"x-ms-range": f"bytes={start}-{start + length - 1}",
                                                    "x-ms-version": blob.api_version})
        # stream=True: the pipeline must not try to decode the payload as text; we read it below (a truncated
        # body raises IncompleteReadError there, which is transient).
        resp = blob._client._send_request(req, stream=True)
        try:
            body = resp.read()
        finally:
            resp.close()
        if resp.status_code == 416:  # range starts at/after the end of the blob
            return b""
        if resp.status_code not in (200, 206):
            raise HttpResponseError(response=resp)
        return body

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        return super().read_range(_strip_query(uri)[0], start, length)

    def upload(self, local_path: str, uri: str, sha256: str | None = None) -> None:
        name = self._name(uri)

        def once():
            with open(local_path, "rb") as f:
                self.container.upload_blob(name, f, overwrite=True, metadata={SHA256_KEY: sha256} if sha256 else None,
                                           max_concurrency=1)

        self.call(uri, once)
        self.metrics.count("uploaded_bytes", os.path.getsize(local_path))
