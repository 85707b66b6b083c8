"""RunConfig's sections, their fields and defaults, and the allowed values (the schema of `--set` keys).

Sources, later wins: built-in defaults → workload YAML (`--workload NAME|FILE`) → `--data URI` → `--set a.b=v`.
Every field is reachable as `--set section.key=value`; the keys listed in shared/DESIGN.md are a public contract.
Validation happens once, here, up front: a bad key, type or value raises UsageError naming it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Union

from tfbertperf.errors import UsageError

AUTOTUNE = "autotune"
IntOrAuto = Union[int, str]  # an int, or the string "autotune"

WORKLOAD_DIR = Path(__file__).resolve().parent.parent / "workloads"


def data_home() -> str:
    """Root of locally prepared default data sets ($TFBERTPERF_DATA_HOME, else ~/.cache/tfbertperf)."""
    return os.environ.get("TFBERTPERF_DATA_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tfbertperf"
    )


def cache_home() -> str:
    """Root of what is kept between runs that is not a data set (learned vocabularies): $TFBERTPERF_CACHE_HOME,
    else ~/.cache/tfbertperf — apart from the data home, so a run that prepares into its own data home still
    reuses them."""
    return os.environ.get("TFBERTPERF_CACHE_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tfbertperf"
    )


def corpus_stem(spec: str) -> str:
    """A folder-name-safe short name of a corpus spec: its first item's base name without extension
    ("~/texts/rev.csv,b.csv" → "rev"; "gs://bucket/corpus/" → "corpus")."""
    first = (spec.split(",")[0].strip().rstrip("/") or "corpus").replace("\\", "/").rsplit("/", 1)[-1]
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", os.path.splitext(first)[0] or first).strip("._")
    return stem[:40] or "corpus"


def default_data_dir(cfg: "RunConfig | None" = None) -> str:
    """Where the embedded default data set for `cfg` lives (prepared on first use).  The directory name carries
    every preparation knob, so changing one prepares a new set instead of silently reusing a mismatched one."""
    if cfg is None:
        cfg = RunConfig()
    d = cfg.data
    corpus = "topics" if not d.corpus else f"{corpus_stem(d.corpus)}-c{hashlib.sha256(d.corpus.encode()).hexdigest()[:10]}"
    vocab = "" if not d.vocab else "-uv" + hashlib.sha256(d.vocab.encode()).hexdigest()[:10]
    key = (f"{cfg.model.task}-{corpus}{vocab}-s{d.seq_len}-p{d.max_predictions}-v{d.vocab_size}"
           f"-d{d.dupe_factor}-n{d.num_shards}-seed{d.seed}")
    return os.path.join(data_home(), key)


@dataclass(frozen=True)
class ModelConfig:
    size: str = "tiny"  # tiny|mini|small|medium|base|large (BERT family; see model/bert.py)
    task: str = "pretrain"  # pretrain (MLM+NSP) | classify (sequence classification)
    dropout: float = 0.1  # hidden and attention dropout
    num_labels: int = 0  # classify only: 0 = as many as the prepared data has (manifest); synthetic batches: 2
    init: str = ""  # a local Hugging Face BERT directory (config.json + model.safetensors): architecture + weights


DEFAULT_NUM_LABELS = 2  # classify labels where no prepared data says how many (synthetic batches)


@dataclass(frozen=True)
class DataConfig:
    # path | file:// | gs://… | az://… ; "" = embedded default, prepared on first use.  A folder with our
    # manifest.json, or the user's TFRecords as they are: a folder, a glob (gs://b/wiki/*.tfrecord), one file or a
    # comma list, described from the records (data/described.py; docs/your-data.md) and never written to
    uri: str = ""
    mode: str = "local"  # local|native|stream|stage (how remote shards are read)
    seq_len: int = 128  # tokens per example
    max_predictions: int = 20  # masked positions per example (google-research/bert max_predictions_per_seq)
    corpus: str = ""  # text files for `prepare` (comma-separated); "" = Python's pydoc_data.topics
    vocab: str = ""  # a user vocab.txt; "" = learn WordPiece from the corpus
    vocab_size: int = 8000  # target size when learning the vocab
    num_shards: int = 8  # TFRecord shards written by prepare
    dupe_factor: int = 2  # times the corpus is re-masked/re-paired (scales the data size)
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    seed: int = 12345  # data preparation seed (examples are deterministic for a seed)
    # Emulated slow storage for *local* data (ground-truth injection without cloud access)
    read_latency_ms: float = 0.0  # added to every shard open and every read of the local backend
    read_bandwidth_mbps: float = 0.0  # cap on local reads in MB/s; 0 = unlimited
    # Remote read modes
    chunk_mb: float = 8.0  # stream: ranged-read size
    concurrency: int = 4  # stream/stage: parallel requests
    cache_dir: str = ""  # stage: local cache ("" = a temp dir under the run)
    cache_mb: int = 2048  # stage: bound on the local cache
    lookahead: int = 4  # stage: shards downloaded ahead of consumption
    skip_corrupt: bool = False  # skip damaged TFRecords (counted in storage.records_skipped) instead of failing
    # "sha256": hash every shard against manifest.json before training (local, native, stream; stage mode
    # always checks the shards it downloads); "none" = sizes only
    verify: str = "none"
    # the user's TFRecords: auto = detect GZIP per file (magic bytes 1f 8b); none | gzip = insist on that
    compression: str = "auto"


@dataclass(frozen=True)
class PipelineConfig:
    preset: str = "tuned"  # tuned | naive (sequential reads, per-example parse, no prefetch)
    cycle_length: IntOrAuto = AUTOTUNE  # interleave: shards read concurrently
    num_parallel_calls: IntOrAuto = AUTOTUNE  # interleave and map parallelism
    prefetch: IntOrAuto = AUTOTUNE  # batches prefetched; 0 = none
    shuffle_buffer: IntOrAuto = 1024  # examples; 0 = no shuffle
    cache: str = "none"  # none|memory|disk (after parse)
    tokenize: str = "pretokenized"  # pretokenized|inline (FastBertTokenizer inside tf.data)
    deterministic: bool = False  # interleave/map order determinism
    parse_after_batch: bool = True  # vectorized parse_example after batch (naive: per-example before batch)
    device_prefetch: int = 0  # batches staged on the first GPU ahead of the step (prefetch_to_device); 0 = off
    # off | local:N (a dispatcher and N workers started on 127.0.0.1 for the run) | grpc://HOST:PORT[/JOB] (a
    # running dispatcher): the pipeline up to its parsed batches runs on the tf.data service (data/service.py)
    data_service: str = "off"
    data_service_mode: str = "parallel_epochs"  # parallel_epochs | distributed_epoch (the service's processing mode)


@dataclass(frozen=True)
class TrainConfig:
    batch_size: int = 32  # global batch size
    steps: int = 60  # training steps (the step timer sees all of them)
    strategy: str = "default"  # default|one_device|mirrored|multi_worker|tpu
    device: str = ""  # one_device: e.g. /gpu:0 ("" = /cpu:0 here)
    precision: str = "float32"  # float32|mixed_float16|mixed_bfloat16
    jit: bool = False  # XLA-compile the train step
    remat: bool = False  # recompute each transformer block in the backward pass: less memory, more compute
    seed: int = 42
    deterministic: bool = False  # tf.config.experimental.enable_op_determinism + seeded shuffles
    learning_rate: float = 1e-4
    warmup_steps: int = 5  # steps excluded from throughput (tracing/compilation)
    log_every: int = 10  # progress line every N steps
    checkpoint_every: int = 0  # save a checkpoint every N steps into <run dir>/checkpoints (0 = off; --resume)


@dataclass(frozen=True)
class ProfileConfig:
    # profiled step window START:STOP (STOP exclusive); "auto" = a steady window chosen to fit train.steps
    # (auto_window); "" or "none" = no profile.  Only a START:STOP the user wrote can be an error.
    steps: str = "auto"
    host_tracer_level: int = 2  # tf.profiler host tracer level (1 = user, 2 = +high-level TF ops, 3 = verbose)
    python_tracer: bool = False  # Python function tracer (expensive; off by default)
    device_tracer_level: int = 1
    threadpool_events: bool = False  # TF's thread-pool task events (Eigen threads in Trace Viewer; 3/4 of a trace)
    # what-if probe: steps on a cached in-memory batch (compute-only T_c); 0 = off; "auto" = blocks of 5 until the
    # input cost's 95 % interval is ±2.5 pp (train/probe.py auto_plan), as ProfileCallback's default
    probe_steps: IntOrAuto = 20
    probe_blocks: int = 4  # the probe's steps run in this many blocks spread through the steady steps; 1 = after the loop
    au_threshold: float = 0.90  # accelerator utilization pass/fail threshold (MLPerf Storage)
    step_timer: bool = True  # always-on get-next vs. rest timer
    ceiling_seconds: float = 3.0  # input ceiling: seconds the pipeline alone runs after the loop; 0 = off
    utilization_hz: float = 10.0  # host utilization sampler rate (samples/s); 0 = off


@dataclass(frozen=True)
class EmulateConfig:
    device: str = "none"  # none = run the real model; else a device profile name (train/devices.yaml)
    step_ms: float = 0.0  # > 0: the device step time in ms, overriding the profile's; 0 = from the profile
    accelerators: int = 1  # data-parallel emulated devices: one step consumes accelerators × train.batch_size


@dataclass(frozen=True)
class RunSection:
    out: str = "runs"  # runs root directory
    name: str = ""  # run name suffix ("" = workload name)


@dataclass(frozen=True)
class RunConfig:
    workload: str = "default"
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    profile: ProfileConfig = field(default_factory=ProfileConfig)
    emulate: EmulateConfig = field(default_factory=EmulateConfig)
    run: RunSection = field(default_factory=RunSection)

    # ---- conveniences -------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def profile_window(self) -> tuple[int, int] | None:
        """(start, stop) steps of the profiled window, stop exclusive; None when profiling is off (or, with
        profile.steps=auto, when the run is too short to hold a window after its warm-up)."""
        if self.window_is_auto:
            return auto_window(self.train.steps, self.train.warmup_steps)
        return parse_window(self.profile.steps, self.train.steps)

    @property
    def window_is_auto(self) -> bool:
        """profile.steps was left to follow the run (not a START:STOP the user wrote)."""
        return str(self.profile.steps or "").strip().lower() == AUTO_WINDOW

    def window_choice(self) -> str:
        """One line saying which steps are profiled and who chose them (printed at the start, kept in the report)."""
        w = self.profile_window
        if w is None:
            if self.window_is_auto:
                return (f"profile: none — a {self.train.steps}-step run is too short for a window after its warm-up "
                        f"(--set profile.steps=START:STOP to force one)")
            return "profile: off (profile.steps=none)"
        how = (f"chosen to fit the {self.train.steps}-step run: after warm-up, in its steady middle"
               if self.window_is_auto else "profile.steps")
        return f"profiled steps {w[0]}–{w[1] - 1} ({w[1] - w[0]} steps; {how})"

    def resolved_data_uri(self) -> str:
        return self.data.uri or default_data_dir(self)

    def uses_default_data(self) -> bool:
        return not self.data.uri


SECTIONS = {f.name: f.type for f in fields(RunConfig) if f.name != "workload"}
_SECTION_CLASSES = {
    "model": ModelConfig,
    "data": DataConfig,
    "pipeline": PipelineConfig,
    "train": TrainConfig,
    "profile": ProfileConfig,
    "emulate": EmulateConfig,
    "run": RunSection,
}

CHOICES = {
    ("model", "size"): ("tiny", "mini", "small", "medium", "base", "large"),
    ("model", "task"): ("pretrain", "classify"),
    ("data", "mode"): ("local", "native", "stream", "stage"),
    ("data", "verify"): ("none", "sha256"),
    ("data", "compression"): ("auto", "none", "gzip"),
    ("pipeline", "preset"): ("tuned", "naive"),
    ("pipeline", "cache"): ("none", "memory", "disk"),
    ("pipeline", "tokenize"): ("pretokenized", "inline"),
    ("pipeline", "data_service_mode"): ("parallel_epochs", "distributed_epoch"),
    ("train", "strategy"): ("default", "one_device", "mirrored", "multi_worker", "tpu"),
    ("train", "precision"): ("float32", "mixed_float16", "mixed_bfloat16"),
}

# Lower bounds for numbers (inclusive)
MINIMUM = {
    ("train", "checkpoint_every"): 0,
    ("data", "seq_len"): 8,
    ("data", "max_predictions"): 1,
    ("data", "vocab_size"): 100,
    ("data", "num_shards"): 1,
    ("data", "dupe_factor"): 1,
    ("data", "read_latency_ms"): 0,
    ("data", "read_bandwidth_mbps"): 0,
    ("data", "chunk_mb"): 0.0625,
    ("data", "concurrency"): 1,
    ("data", "cache_mb"): 1,
    ("data", "lookahead"): 0,
    ("pipeline", "cycle_length"): 1,
    ("pipeline", "num_parallel_calls"): 1,
    ("pipeline", "prefetch"): 0,
    ("pipeline", "shuffle_buffer"): 0,
    ("pipeline", "device_prefetch"): 0,
    ("train", "batch_size"): 1,
    ("train", "steps"): 1,
    ("train", "warmup_steps"): 0,
    ("train", "log_every"): 1,
    ("profile", "host_tracer_level"): 0,
    ("profile", "device_tracer_level"): 0,
    ("profile", "probe_steps"): 0,
    ("profile", "probe_blocks"): 1,
    ("profile", "ceiling_seconds"): 0.0,
    ("profile", "utilization_hz"): 0.0,
    ("model", "num_labels"): 0,
    ("emulate", "step_ms"): 0.0,
    ("emulate", "accelerators"): 1,
}


def parse_data_service(value) -> tuple[str, int, str]:
    """pipeline.data_service → (kind, workers, address): ("off", 0, ""), ("local", N, ""), ("grpc", 0,
    "HOST:PORT[/JOB]").  JOB (letters, digits, '-'): a job name shared by every trainer that names it — they split
    its elements (multi-worker training from one service).  Raises UsageError naming the setting."""
    v = str(value or "").strip()
    shown = f"--set pipeline.data_service={value!r}"
    if v.lower() in ("", "off", "none"):
        return "off", 0, ""
    if v.lower().startswith("local:"):
        n = v.split(":", 1)[1]
        if not n.isdigit() or not 1 <= int(n) <= 64:
            raise UsageError(f"{shown}: local:N needs N workers, 1 to 64 (e.g. local:2)")
        return "local", int(n), ""
    if v.lower().startswith("grpc://"):
        where, _, job = v[len("grpc://"):].partition("/")
        host, _, port = where.rpartition(":")
        if host and port.isdigit() and 0 < int(port) < 65536 and (not job or job.replace("-", "").isalnum()):
            return "grpc", 0, f"{host}:{port}" + (f"/{job}" if job else "")
    raise UsageError(f"{shown}: expected off, local:N or grpc://HOST:PORT[/JOB]")


AUTO_WINDOW = "auto"
AUTO_WINDOW_STEPS = 20  # the longest window auto_window chooses: xprof's tables are stable from ~10 steps
WARMUP_SHARE = 4  # warm-up takes at most 1/4 of a run's steps


def warmup_for(steps: int, warmup_steps: int) -> int:
    """The warm-up a run of `steps` steps gets: `train.warmup_steps`, but at most a quarter of the run so that
    three quarters are measured, and at least 1 (the first step traces the graph) unless the run has one step."""
    return max(0, min(int(warmup_steps), max(1, steps // WARMUP_SHARE), steps - 1))


def auto_window(total_steps: int, warmup_steps: int) -> tuple[int, int] | None:
    """The window profile.steps=auto profiles: up to AUTO_WINDOW_STEPS steps (a third of the run at most) centred
    in the run, starting after warm-up + 1 (the capture opens one step early, train/probe.py traced_steps) —
    steps 20–39 of the default 60.  None when fewer than 2 steps fit (xprof needs a step on each side)."""
    warmup = warmup_for(total_steps, warmup_steps)
    length = min(AUTO_WINDOW_STEPS, max(2, total_steps // 3))
    start = max(warmup + 1, total_steps // 2 - length // 2)
    stop = min(start + length, total_steps)
    return (start, stop) if stop - start >= 2 else None


def parse_window(spec, total_steps: int | None, label: str = "--set profile.steps={!r}") -> tuple[int, int] | None:
    """"START:STOP" (or a (start, stop) pair) → (start, stop), STOP exclusive; None for "", "none", "off", "0".

    `total_steps` (None = unbounded) is the run's last step; `label` names the setting in errors ({!r} = spec).
    """
    if isinstance(spec, (tuple, list)) and len(spec) == 2:
        spec = f"{spec[0]}:{spec[1]}"
    shown = label.format(spec)
    spec = str(spec or "").strip().lower()
    if spec in ("", "none", "off", "0"):
        return None
    try:
        a, b = spec.split(":")
        start, stop = int(a), int(b)
    except ValueError:
        raise UsageError(f"{shown}: expected START:STOP, e.g. 20:40") from None
    if not (0 <= start < stop):
        raise UsageError(f"{shown}: need 0 <= START < STOP")
    if total_steps is not None and stop > total_steps:
        hint = (f"; e.g. --set profile.steps={total_steps // 3}:{2 * total_steps // 3}, or leave profile.steps "
                "unset (auto: a window that fits the run)") if total_steps >= 3 else "; --set profile.steps=none"
        raise UsageError(f"{shown}: window ends after the last step (train.steps={total_steps}){hint}")
    return start, stop
