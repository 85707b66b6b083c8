"""The tf.data service split of the input pipeline (`pipeline.data_service`; local servers: data/service_cluster.py).

Split point: everything build_dataset does up to and including the parsed batches — shard read, shuffle, repeat,
batch, parse, and with tokenize=inline the tokenizer and the masking — runs on the service's workers
(`distribute(processing_mode=pipeline.data_service_mode, service=…)`); the trainer keeps only the prefetch that
hands batches to the device.  What crosses the wire is one per-replica batch of int32/float32 features an element.

What runs on a worker is a serialized graph, so it cannot call back into this process: the shard reads there are
TF's own TFRecordDataset, not the storage backend's counted reader (whose accounting is a py_function).  Hence:

* storage reads happen in the workers and the trainer's storage metrics do not see them; for local:N the run
  reads each worker process's /proc figures instead (bytes passed to read(), CPU seconds); for grpc:// nothing.
* anything built on Python (from_generator, py_function: stream/stage read modes, emulated read latency, the
  damaged-record skipper) is refused up front with one line (TF #50252: the service cannot serialize it).

The trainer counts what it receives (`Tally`: elements, examples, distinct examples by a fingerprint of each row's
input_ids), from which the report derives what a lost worker cost: with `distributed_epoch` (at most once per
pass) examples never delivered, with `parallel_epochs` (each worker reads everything) examples delivered again.
"""

from __future__ import annotations

import socket
import threading
from collections import Counter

from tfbertperf.config.schema import parse_data_service
from tfbertperf.errors import UsageError
from tfbertperf.storage.base import ShardSource

CONNECT_TIMEOUT_S = 5.0  # an unreachable dispatcher is named after this long
PYTHON_OPS = ("PyFunc", "PyFuncStateless", "EagerPyFunc")  # from_generator and py_function datasets hold these
READ_BUFFER_BYTES = 256 * 1024  # the workers' TFRecordDataset buffer (the local backend's read size)


def enabled(cfg) -> bool:
    return parse_data_service(cfg.pipeline.data_service)[0] != "off"


def check(cfg) -> None:
    """Refuse, before anything starts, the settings whose reads run as Python (module docstring)."""
    if not enabled(cfg):
        return
    d = cfg.data
    why = None
    if d.mode in ("stream", "stage") and not _is_local(cfg):
        why = f"data.mode={d.mode} reads shards through Python (from_generator / py_function)"
    elif d.read_latency_ms or d.read_bandwidth_mbps:
        why = "emulated slow storage (data.read_latency_ms / read_bandwidth_mbps) sleeps in a py_function"
    elif d.skip_corrupt:
        why = "data.skip_corrupt reads damaged shards with a Python parser"
    if why:
        raise UsageError(f"--set pipeline.data_service={cfg.pipeline.data_service}: {why}, which the tf.data "
                         "service cannot run on its workers (TF #50252); use data.mode=local or native")


def _is_local(cfg) -> bool:
    uri = cfg.resolved_data_uri()
    return "://" not in uri or uri.startswith("file://")


def check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """One line naming `address` (HOST:PORT[/JOB]) when nothing accepts a connection there within `timeout_s`."""
    host, _, port = address.split("/", 1)[0].rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise UsageError(f"--set pipeline.data_service=grpc://{address}: no tf.data dispatcher reachable at "
                         f"{host}:{port} within {timeout_s:.0f} s ({e.strerror or e})") from None


def plain_source(source: ShardSource) -> ShardSource:
    """`source` with TF's own TFRecord reader (no Python accounting) for the workers; same file list."""
    import tensorflow as tf

    def read(filename):
        return tf.data.TFRecordDataset(filename, compression_type=source.compression, buffer_size=READ_BUFFER_BYTES)

    return ShardSource(source.filenames, read, source.backend, source.mode, close=source.close,
                       compression=source.compression)


def python_ops(dataset) -> list[str]:
    """The Python-calling ops in `dataset`'s graph (its functions included): what the service cannot run."""
    from tensorflow.core.framework import graph_pb2

    graph = graph_pb2.GraphDef()
    graph.ParseFromString(dataset._as_serialized_graph().numpy())  # noqa: SLF001 — no public graph accessor
    nodes = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
    return sorted({n.op for n in nodes if n.op in PYTHON_OPS})


def distribute(dataset, cfg, *, session=None):
    """Run `dataset` on the service named by cfg.pipeline.data_service (grpc://HOST:PORT[/JOB]; local:N is
    rewritten to its cluster's address by the run before the pipeline is built).  JOB names a job shared by the
    trainers that name it (suffixed by `session`'s pipeline count, so that a run's ceiling never joins its training
    job); none: each iterator its own job.  `session` (data/service_session.py) also counts what arrives."""
    import tensorflow as tf

    kind, _, address = parse_data_service(cfg.pipeline.data_service)
    if kind != "grpc":
        raise UsageError(f"--set pipeline.data_service={cfg.pipeline.data_service}: no running service to use")
    found = python_ops(dataset)
    if found:
        raise UsageError(f"--set pipeline.data_service={cfg.pipeline.data_service}: the pipeline calls Python "
                         f"({', '.join(found)}: from_generator or py_function), which the tf.data service cannot "
                         "serialize (TF #50252)")
    address, _, job = address.partition("/")
    suffix = session.next_job_suffix() if session is not None else ""
    out = dataset.apply(tf.data.experimental.service.distribute(
        processing_mode=cfg.pipeline.data_service_mode, service=f"grpc://{address}",
        job_name=(job + suffix) if job else None))
    return session.tally.wrap(out) if session is not None else out


class Tally:
    """What the trainer received from the service: elements (batches), examples, and how often each example
    came (a 64-bit fingerprint of its input_ids row).  `wrap(ds)` counts as the elements pass."""

    def __init__(self) -> None:
        self.elements = 0
        self.seen: Counter = Counter()
        self._lock = threading.Lock()

    def _count(self, prints) -> int:
        rows = prints.numpy()
        with self._lock:
            self.elements += 1
            self.seen.update(r.tobytes() for r in rows)
        return 0

    def wrap(self, dataset):
        import tensorflow as tf

        def count(features):
            done = tf.py_function(self._count, [tf.fingerprint(features["input_ids"])], tf.int64)
            with tf.control_dependencies([done]):
                return {k: tf.identity(v) for k, v in features.items()}

        return dataset.map(count)

    def summary(self, dataset_examples: int | None, processing_mode: str, workers_lost: int) -> dict:
        """Counts plus what a lost worker cost: `unseen_examples` (examples of the data set never delivered,
        meaningful once a whole pass's worth arrived) and `repeated_examples` (deliveries of an example already
        delivered: later passes, parallel_epochs' copy per worker, and re-reads)."""
        examples = sum(self.seen.values())
        distinct = len(self.seen)
        full_pass = bool(dataset_examples) and examples >= dataset_examples
        return {"elements": self.elements, "examples": examples, "distinct_examples": distinct,
                "dataset_examples": dataset_examples,
                "unseen_examples": max(0, dataset_examples - distinct) if full_pass else None,
                "repeated_examples": examples - distinct, "workers_lost": workers_lost,
                "loss_semantics": ("at most once per pass: a lost worker's splits are not re-read"
                                   if processing_mode == "distributed_epoch" else
                                   "every worker reads the whole data set: a lost worker's examples come again "
                                   "from the others")}
