"""Where the training data lives, and how fast a first read of it is.

Local paths: the mount that holds the path (from /proc/self/mountinfo), its filesystem type classified as
local / network / fuse / memory / overlay, whether the block device is rotational, and a short probe:
first-byte latency of small random reads and sequential read throughput, on cold pages (the probed ranges are
dropped from the page cache with posix_fadvise first, so the figure is the device or the network, not RAM).
The probe is bounded in time (PROBE_BUDGET_S) and bytes (PROBE_MAX_BYTES).

gs:// and az:// URIs: scheme, bucket/container, prefix, emulator endpoint and how access is authorised —
from environment variables only.  No network call is ever made here.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

from tfbertperf.redact import redact_connection_string, redact_text

# Filesystem types by how a read reaches the bytes.  A read on "network" or "fuse" crosses a network or a
# user-space daemon; that is the usual reason a training input pipeline is slower on one machine than another.
NETWORK_FS = {
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "lustre", "gpfs", "afs", "beegfs", "panfs",
    "wekafs", "davfs", "ncpfs", "9p", "virtiofs", "orangefs", "ocfs2", "gfs2",
}
MEMORY_FS = {"tmpfs", "ramfs"}
OVERLAY_FS = {"overlay", "aufs", "overlayfs"}
# FUSE daemons that are object stores underneath (a "file" read is an HTTP request)
OBJECT_STORE_FUSE = {"gcsfuse", "blobfuse", "blobfuse2", "s3fs", "goofys", "mountpoint-s3", "rclone", "juicefs"}

PROBE_BUDGET_S = 0.6  # wall-clock bound for the whole read probe
PROBE_MAX_BYTES = 64 << 20  # sequential-read bound
LATENCY_SAMPLES = 16  # small random reads for the first-byte latency
LATENCY_READ_BYTES = 4096
SEQ_CHUNK_BYTES = 1 << 20
MAX_FILES_SCANNED = 2000  # directory entries looked at when choosing files to probe


def _unescape_mount(s: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal (\040 …)
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 3 < len(s) and s[i + 1:i + 4].isdigit():
            out.append(chr(int(s[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def read_mounts(mountinfo: str = "/proc/self/mountinfo") -> list[dict]:
    """Mounts as [{"mount_point", "fstype", "source", "major_minor", "options"}] (empty if unreadable)."""
    mounts = []
    try:
        lines = Path(mountinfo).read_text().splitlines()
    except OSError:
        return mounts
    for line in lines:
        pre, sep, post = line.partition(" - ")
        if not sep:
            continue
        f, g = pre.split(), post.split()
        if len(f) < 5 or len(g) < 2:
            continue
        mounts.append({
            "mount_point": _unescape_mount(f[4]), "major_minor": f[2], "options": f[5] if len(f) > 5 else "",
            "fstype": g[0], "source": _unescape_mount(g[1]),
        })
    return mounts


def classify_fstype(fstype: str) -> str:
    """'local' | 'network' | 'fuse' | 'memory' | 'overlay' | 'unknown' for a filesystem type name."""
    t = (fstype or "").lower()
    if not t:
        return "unknown"
    if t in NETWORK_FS or t.startswith("nfs"):
        return "network"
    if t.startswith("fuse") or t in OBJECT_STORE_FUSE:
        return "fuse"
    if t in MEMORY_FS:
        return "memory"
    if t in OVERLAY_FS:
        return "overlay"
    return "local"


def mount_of(path: str, mounts: list[dict] | None = None) -> dict | None:
    """The mount holding `path` (longest mount-point prefix of its real path), or None."""
    mounts = read_mounts() if mounts is None else mounts
    real = os.path.realpath(path)
    best = None
    for m in mounts:
        mp = m["mount_point"]
        if real == mp or real.startswith(mp.rstrip("/") + "/") or mp == "/":
            if best is None or len(mp) >= len(best["mount_point"]):
                best = m
    return best


def _rotational(major_minor: str) -> bool | None:
    """True for a spinning disk, False for SSD/virtual disk, None when the device has no queue info."""
    if not major_minor or major_minor.startswith("0:"):
        return None  # 0:N = no block device (tmpfs, overlay, nfs, fuse …)
    try:
        dev = Path(os.path.realpath(f"/sys/dev/block/{major_minor}"))
    except OSError:
        return None
    for d in (dev, dev.parent):  # a partition's queue/ is on its parent disk
        q = d / "queue" / "rotational"
        try:
            return q.read_text().strip() == "1"
        except OSError:
            continue
    return None


def _existing_ancestor(path: str) -> str:
    p = os.path.abspath(path)
    while p and not os.path.exists(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return p or "/"


def _pick_files(path: str, limit: int = 4) -> list[tuple[str, int]]:
    """Up to `limit` regular, non-empty files at `path` (a file or a directory tree), largest first, preferring
    TFRecord shards.  The scan is bounded so a huge tree costs no more than MAX_FILES_SCANNED entries."""
    if os.path.isfile(path):
        try:
            return [(path, os.path.getsize(path))]
        except OSError:
            return []
    found: list[tuple[str, int]] = []
    seen = 0
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            seen += 1
            if seen > MAX_FILES_SCANNED:
                break
            full = os.path.join(root, name)
            try:
                st = os.stat(full)
            except OSError:
                continue
            if st.st_size > 0 and os.path.isfile(full):
                found.append((full, st.st_size))
        if seen > MAX_FILES_SCANNED:
            break
    shards = [f for f in found if ".tfrecord" in os.path.basename(f[0])]
    pool = shards or found
    pool.sort(key=lambda f: -f[1])
    return pool[:limit]


SYNC_MAX_BYTES = 256 << 20  # flush files up to this size before dropping their pages (see _drop_cache)


def _drop_cache(fd: int, offset: int, length: int, size: int) -> bool:
    """Ask the kernel to drop cached pages of a range so the next read goes to the device; no root needed.

    Only clean pages can be dropped, and freshly prepared shards are still dirty, so small files are flushed
    first (fdatasync of data the kernel would write back within seconds anyway).  Returns False when the pages
    may still be cached (no posix_fadvise, or a large file that was not flushed)."""
    synced = size <= SYNC_MAX_BYTES
    if synced:
        try:
            os.fdatasync(fd)
        except OSError:
            synced = False
    try:
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)
        return synced
    except (AttributeError, OSError):
        return False


def _percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    if not s:
        return 0.0
    k = min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))
    return s[k]


def _first_byte_ms(name: str, offset: int, size: int) -> tuple[float, bool]:
    """ms to open `name` and read LATENCY_READ_BYTES at `offset`, after asking the kernel to drop that range from
    the page cache; and whether the drop could be done (see _drop_cache)."""
    fd = os.open(name, os.O_RDONLY)
    try:
        dropped = _drop_cache(fd, offset, LATENCY_READ_BYTES, size)
    finally:
        os.close(fd)
    t0 = time.perf_counter()
    fd = os.open(name, os.O_RDONLY)
    try:
        os.pread(fd, LATENCY_READ_BYTES, offset)
        return (time.perf_counter() - t0) * 1e3, dropped
    finally:
        os.close(fd)


def probe_reads(path: str, budget_s: float = PROBE_BUDGET_S, max_bytes: int = PROBE_MAX_BYTES) -> dict:
    """Short read probe of the files at a local `path`.

    Returns {"files": n, "first_byte_latency_ms": {"p50", "p90", "max"}, "latency_samples": n,
    "read_mb_per_sec": MB/s (10^6 bytes per second) of a sequential 1 MiB-chunk read, "bytes_read": bytes,
    "cold": True when the probed ranges were dropped from the page cache first, "elapsed_ms": ms}, or
    {"skipped": reason}.  First-byte latency = time to open a file and read 4 KiB at a random offset.
    """
    t_start = time.perf_counter()
    files = _pick_files(path)
    if not files:
        return {"skipped": "no readable files at this location yet"}
    rng = random.Random(0)  # same offsets every run: comparable across machines
    latencies_ms: list[float] = []
    cold = True
    lat_deadline = t_start + budget_s * 0.4
    for i in range(LATENCY_SAMPLES):
        if time.perf_counter() > lat_deadline:
            break
        name, size = files[i % len(files)]
        off = rng.randrange(0, max(1, size - LATENCY_READ_BYTES)) & ~4095
        try:
            ms, dropped = _first_byte_ms(name, off, size)
        except OSError:
            continue  # an unreadable file costs one sample; latency_samples counts those taken
        latencies_ms.append(ms)
        cold &= dropped
    # Sequential throughput on the largest file
    name, size = files[0]
    nbytes, seq_s = 0, 0.0
    try:
        fd = os.open(name, os.O_RDONLY)
        try:
            span = min(size, max_bytes)
            cold &= _drop_cache(fd, 0, span, size)
            seq_deadline = t_start + budget_s
            t0 = time.perf_counter()
            while nbytes < span and time.perf_counter() < seq_deadline:
                chunk = os.pread(fd, min(SEQ_CHUNK_BYTES, span - nbytes), nbytes)
                if not chunk:
                    break
                nbytes += len(chunk)
            seq_s = time.perf_counter() - t0
        finally:
            os.close(fd)
    except OSError as e:
        return {"skipped": f"cannot read {redact_text(name)}: {e.strerror or e}"}
    return {
        "files": len(files),
        "latency_samples": len(latencies_ms),
        "first_byte_latency_ms": {
            "p50": round(_percentile(latencies_ms, 0.5), 4),
            "p90": round(_percentile(latencies_ms, 0.9), 4),
            "max": round(max(latencies_ms), 4) if latencies_ms else 0.0,
        },
        "bytes_read": nbytes,
        "read_mb_per_sec": round(nbytes / seq_s / 1e6, 1) if seq_s > 0 else 0.0,
        "cold": bool(cold),
        "elapsed_ms": round((time.perf_counter() - t_start) * 1e3, 1),
    }


def _remote_location(scheme: str, bucket: str, prefix: str) -> dict:
    env = os.environ
    info: dict = {"kind": "object-store", "bucket": bucket, "prefix": prefix}
    if scheme == "gs":
        emu = env.get("STORAGE_EMULATOR_HOST")
        info["emulator"] = redact_text(emu) if emu else None
        if emu:
            info["access"] = "anonymous (STORAGE_EMULATOR_HOST)"
        elif env.get("GOOGLE_APPLICATION_CREDENTIALS"):
            info["access"] = "service-account file (GOOGLE_APPLICATION_CREDENTIALS)"
        else:
            info["access"] = "application default (gcloud / metadata server)"
    elif scheme == "az":
        conn = env.get("AZURE_STORAGE_CONNECTION_STRING")
        endpoint = None
        if conn:
            safe = redact_connection_string(conn)
            parts = dict(p.split("=", 1) for p in safe.split(";") if "=" in p)
            parts_lc = {k.lower(): v for k, v in parts.items()}
            endpoint = parts_lc.get("blobendpoint")
            if parts_lc.get("usedevelopmentstorage", "").lower() == "true":
                endpoint = endpoint or "http://127.0.0.1:10000/devstoreaccount1"
            info["access"] = "connection string (AZURE_STORAGE_CONNECTION_STRING)"
            info["account"] = parts_lc.get("accountname")
        else:
            url = env.get("AZURE_STORAGE_ACCOUNT_URL")
            endpoint = redact_text(url.split("?", 1)[0]) if url else None
            if env.get("AZURE_STORAGE_SAS_TOKEN") or (url and "sig=" in url):
                info["access"] = "SAS token"
            elif env.get("AZURE_STORAGE_KEY"):
                info["access"] = "account key (AZURE_STORAGE_KEY)"
            else:
                info["access"] = "none configured"
        info["endpoint"] = endpoint
        host = (endpoint or "").split("://", 1)[-1].split("/", 1)[0]
        local = host.split(":")[0] in ("127.0.0.1", "localhost", "::1", "[::1]", "azurite")
        info["emulator"] = endpoint if local else None
    info["probe"] = {"skipped": "remote object store: the fingerprint makes no network calls "
                                "(report.storage has the measured request latency)"}
    return info


def describe_location(uri: str, probe: bool = True) -> dict:
    """Describe the data location `uri` (a path, file://, gs://…, az://…).

    Local: {"uri", "scheme": "file", "path", "exists", "mount_point", "fstype", "kind", "source",
    "rotational", "probe"}.  Remote: {"uri", "scheme", "kind": "object-store", "bucket", "prefix", "emulator",
    "access", "probe": {"skipped": …}}.  `probe=False` skips the read probe.
    """
    shown = redact_text(uri)
    if "://" in uri and not uri.startswith("file://"):
        scheme, rest = uri.split("://", 1)
        rest = rest.split("?", 1)[0]  # a SAS query never leaves
        bucket, _, prefix = rest.partition("/")
        return {"uri": shown, "scheme": scheme.lower(), **_remote_location(scheme.lower(), bucket, prefix)}
    path = uri[len("file://"):] if uri.startswith("file://") else uri
    path = os.path.abspath(os.path.expanduser(path))
    exists = os.path.exists(path)
    m = mount_of(_existing_ancestor(path))
    info = {
        "uri": shown, "scheme": "file", "path": redact_text(path), "exists": exists,
        "mount_point": m["mount_point"] if m else None,
        "fstype": m["fstype"] if m else None,
        "kind": classify_fstype(m["fstype"]) if m else "unknown",
        "source": redact_text(m["source"]) if m else None,
        "rotational": _rotational(m["major_minor"]) if m else None,
    }
    if m and info["kind"] == "fuse":
        sub = m["fstype"].split(".", 1)[1] if "." in m["fstype"] else m["source"]
        info["fuse_daemon"] = sub
        info["object_store_backed"] = any(k in (sub or "").lower() for k in OBJECT_STORE_FUSE)
    if not probe:
        info["probe"] = {"skipped": "probe disabled"}
    elif not exists:
        info["probe"] = {"skipped": "path does not exist yet (prepared on first run)"}
    else:
        info["probe"] = probe_reads(path)
    return info
