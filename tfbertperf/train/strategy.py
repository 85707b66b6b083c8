"""Placement (tf.distribute strategy), precision policy and determinism — set up once, before the model.

Everything here touches process-global TF/Keras state, so `setup_run` returns a `restore()` that puts the
precision policy back (op determinism cannot be switched off again in TF; it stays on for the process).
"""

from __future__ import annotations

import glob
import json
import os

from tfbertperf.errors import UsageError

PRECISION_POLICIES = {"float32": "float32", "mixed_float16": "mixed_float16", "mixed_bfloat16": "mixed_bfloat16"}
_NO_TPU = "--set train.strategy=tpu: no TPU found on this machine (no TPU_NAME, no /dev/accel*)"
STRATEGIES = ("default", "one_device", "mirrored", "multi_worker", "tpu")


def split_cpu_devices(n: int) -> list:
    """Split the host CPU into `n` logical devices (so `mirrored` can be exercised without GPUs).

    Must run before TensorFlow initialises its runtime (first op / device listing); raises RuntimeError after.
    Returns the logical CPU devices.
    """
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(n)])
    return tf.config.list_logical_devices("CPU")


def _tpu_present() -> bool:
    # Only local evidence: a named TPU (TPU_NAME, as Cloud TPU tooling sets it) or TPU VM device nodes.
    # The resolver's own auto-detection asks the GCE metadata server, a network call this tool never makes.
    return bool(os.environ.get("TPU_NAME")) or bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


def check_placement(train_cfg) -> None:
    """Refuse a train.device or TPU that is not here (UsageError), before a run directory or any data work.

    Only for one_device and tpu (make_strategy repeats the checks); it lists devices, which starts TF's runtime,
    so it is not for multi_worker (the strategy must come first) or mirrored (split_cpu_devices must come first).
    """
    if train_cfg.strategy == "one_device" and train_cfg.device:
        make_strategy(train_cfg)
    elif train_cfg.strategy == "tpu" and not _tpu_present():
        raise UsageError(_NO_TPU)


def make_strategy(train_cfg):
    """The tf.distribute strategy named by `train_cfg.strategy` (default|one_device|mirrored|multi_worker|tpu).

    multi_worker reads the cluster from TF_CONFIG (see tfbertperf.train.multiworker) and must be created
    before any other TensorFlow op in the process. Raises UsageError for an absent device/TPU or bad TF_CONFIG.
    """
    import tensorflow as tf

    name = train_cfg.strategy
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "one_device":
        device = train_cfg.device or "/cpu:0"
        known = [d.name for d in tf.config.list_logical_devices()]
        wanted = device.lower().replace("/device:", "/").lstrip("/")
        if not any(k.lower().replace("/device:", "/").endswith(wanted) for k in known):
            raise UsageError(
                f"--set train.device={device}: no such device here (available: {', '.join(known) or 'none'})"
            )
        return tf.distribute.OneDeviceStrategy(device)
    if name == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        if gpus:
            return tf.distribute.MirroredStrategy()
        # CPU only: mirror over the logical CPUs (1 unless split_cpu_devices was used); NCCL needs GPUs.
        cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices=cpus, cross_device_ops=tf.distribute.ReductionToOneDevice())
    if name == "multi_worker":
        raw = os.environ.get("TF_CONFIG", "")
        try:
            tf_config = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            raise UsageError("TF_CONFIG: not valid JSON (expected {\"cluster\": {\"worker\": [...]}, \"task\": …})") from None
        if not tf_config.get("cluster", {}).get("worker"):
            raise UsageError(
                "--set train.strategy=multi_worker: TF_CONFIG names no workers; "
                "use `tfbertperf run --workers N` to launch local workers, or set TF_CONFIG on each machine"
            )
        _configure_coordination(tf_config)
        comm = tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.RING
        )
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=comm)
    if name == "tpu":
        if not _tpu_present():
            raise UsageError(_NO_TPU)
        try:
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=os.environ.get("TPU_NAME", "local"))
            tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
        except (ValueError, RuntimeError, tf.errors.OpError) as e:
            raise UsageError(f"--set train.strategy=tpu: TPU not usable: {' '.join(str(e).split())[:200]}") from None
        return tf.distribute.TPUStrategy(resolver)
    raise UsageError(f"--set train.strategy={name!r}: expected one of {', '.join(STRATEGIES)}")


# Coordination-service heartbeat timeout for multi_worker (ms).  It was set long to keep heartbeats out of the
# profiled window, believed to crash TF 2.21's trace collection; measured since
# (tests/programs/mw_profiler_crash.py): the crash is a use-after-free in TSL's TraceMeRecorder::Consume on the collectives'
# cross-thread TraceMe pairs and happens at any heartbeat (crashed attempts per 2-worker group: 1 s 0/4, 10 s 3/10,
# 1 h 2/10).  The value is left as it was (no measurement yet of what TF's 10 s default does to workers starved of
# CPU on a shared host); dead peers are still noticed: collectives fail, and `launch_workers` stops the group when
# any worker exits.
MULTI_WORKER_HEARTBEAT_TIMEOUT_MS = int(os.environ.get("TFBERTPERF_HEARTBEAT_TIMEOUT_MS", 3_600_000))


def _configure_coordination(tf_config: dict) -> None:
    """Configure the coordination service as MultiWorkerMirroredStrategy would, but with our heartbeat."""
    from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
    from tensorflow.python.eager import context

    if context.context().coordination_service is not None:
        return  # already configured (e.g. a second strategy in the same process)
    cluster = tf_config.get("cluster", {})
    jobs = [
        coordination_config_pb2.CoordinatedJob(name=job, num_tasks=len(cluster[job]))
        for job in ("chief", "worker") if cluster.get(job)
    ]
    leader = "/job:chief/replica:0/task:0" if cluster.get("chief") else "/job:worker/replica:0/task:0"
    context.context().configure_coordination_service(
        service_type="standalone", service_leader=leader, coordinated_jobs=jobs,
        heartbeat_timeout_in_ms=MULTI_WORKER_HEARTBEAT_TIMEOUT_MS,
    )


def per_replica_batch_size(global_batch_size: int, replicas: int) -> int:
    """Global batch ÷ replicas; UsageError when it does not divide (every replica must get the same size)."""
    if global_batch_size % replicas:
        raise UsageError(
            f"--set train.batch_size={global_batch_size}: not divisible by the {replicas} replicas of this strategy"
        )
    return global_batch_size // replicas


def setup_run(train_cfg):
    """Seed everything, switch op determinism on if asked, set the Keras precision policy.

    Returns restore(): puts the previous global dtype policy and op-determinism setting back (call it when the
    run ends), so an in-process run (tests, notebooks, benchmarks) leaves the process as it found it.
    """
    import keras
    import tensorflow as tf

    if train_cfg.precision not in PRECISION_POLICIES:
        raise UsageError(
            f"--set train.precision={train_cfg.precision!r}: expected one of {', '.join(PRECISION_POLICIES)}"
        )
    # Python, NumPy, TF and Keras' own seed generator (weight init, dropout) all from train.seed.
    keras.utils.set_random_seed(train_cfg.seed)
    from tensorflow.python.framework import config as tf_config  # public API: enable only, no query or undo

    was_deterministic = tf_config.is_op_determinism_enabled()
    if train_cfg.deterministic:
        tf.config.experimental.enable_op_determinism()
    previous = keras.mixed_precision.global_policy().name
    keras.mixed_precision.set_global_policy(PRECISION_POLICIES[train_cfg.precision])

    def restore():
        keras.mixed_precision.set_global_policy(previous)
        if train_cfg.deterministic and not was_deterministic:
            tf_config.disable_op_determinism()

    return restore
