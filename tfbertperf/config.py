"""RunConfig: one frozen, validated description of a run.

Sources, later wins: built-in defaults → workload YAML (`--workload NAME|FILE`) → `--data URI` → `--set a.b=v`.
Every field is reachable as `--set section.key=value`; the keys listed in shared/DESIGN.md are a public contract.
Validation happens once, here, up front: a bad key, type or value raises UsageError naming it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import yaml

from tfbertperf.errors import UsageError

AUTOTUNE = "autotune"
IntOrAuto = Union[int, str]  # an int, or the string "autotune"

WORKLOAD_DIR = Path(__file__).parent / "workloads"


def data_home() -> str:
    """Root of locally prepared default data sets ($TFBERTPERF_DATA_HOME, else ~/.cache/tfbertperf)."""
    return os.environ.get("TFBERTPERF_DATA_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tfbertperf"
    )


def default_data_dir(cfg: "RunConfig | None" = None) -> str:
    """Where the embedded default data set for `cfg` lives (prepared on first use).  The directory name carries
    every preparation knob, so changing one prepares a new set instead of silently reusing a mismatched one."""
    if cfg is None:
        cfg = RunConfig()
    d = cfg.data
    corpus = "topics" if not d.corpus else "c" + hashlib.sha256(d.corpus.encode()).hexdigest()[:10]
    vocab = "" if not d.vocab else "-uv" + hashlib.sha256(d.vocab.encode()).hexdigest()[:10]
    key = (f"{cfg.model.task}-{corpus}{vocab}-s{d.seq_len}-p{d.max_predictions}-v{d.vocab_size}"
           f"-d{d.dupe_factor}-n{d.num_shards}-seed{d.seed}")
    return os.path.join(data_home(), key)


@dataclass(frozen=True)
class ModelConfig:
    size: str = "tiny"  # tiny|mini|small|medium|base|large (BERT family; see model/bert.py)
    task: str = "pretrain"  # pretrain (MLM+NSP) | classify (sequence classification)
    dropout: float = 0.1  # hidden and attention dropout
    num_labels: int = 2  # classify only


@dataclass(frozen=True)
class DataConfig:
    uri: str = ""  # path | file:// | gs://… | az://… ; "" = embedded default, prepared on first use
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


@dataclass(frozen=True)
class TrainConfig:
    batch_size: int = 32  # global batch size
    steps: int = 60  # training steps (the step timer sees all of them)
    strategy: str = "default"  # default|one_device|mirrored|multi_worker|tpu
    device: str = ""  # one_device: e.g. /gpu:0 ("" = /cpu:0 here)
    precision: str = "float32"  # float32|mixed_float16|mixed_bfloat16
    jit: bool = False  # XLA-compile the train step
    seed: int = 42
    deterministic: bool = False  # tf.config.experimental.enable_op_determinism + seeded shuffles
    learning_rate: float = 1e-4
    warmup_steps: int = 5  # steps excluded from throughput (tracing/compilation)
    log_every: int = 10  # progress line every N steps


@dataclass(frozen=True)
class ProfileConfig:
    steps: str = "20:40"  # profiled step window START:STOP (STOP exclusive); "" or "none" = no profile
    host_tracer_level: int = 2  # tf.profiler host tracer level (1 = user, 2 = +high-level TF ops, 3 = verbose)
    python_tracer: bool = False  # Python function tracer (expensive; off by default)
    device_tracer_level: int = 1
    threadpool_events: bool = False  # TF's thread-pool task events (Eigen threads in Trace Viewer; 3/4 of a trace)
    probe_steps: int = 20  # what-if probe: steps on a cached in-memory batch (compute-only T_c); 0 = off
    probe_blocks: int = 4  # the probe's steps run in this many blocks spread through the steady steps; 1 = after the loop
    au_threshold: float = 0.90  # accelerator utilization pass/fail threshold (MLPerf Storage)
    step_timer: bool = True  # always-on get-next vs. rest timer


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
    run: RunSection = field(default_factory=RunSection)

    # ---- conveniences -------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def profile_window(self) -> tuple[int, int] | None:
        """(start, stop) steps of the profiled window, stop exclusive; None when profiling is off."""
        return parse_window(self.profile.steps, self.train.steps)

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
    "run": RunSection,
}

CHOICES = {
    ("model", "size"): ("tiny", "mini", "small", "medium", "base", "large"),
    ("model", "task"): ("pretrain", "classify"),
    ("data", "mode"): ("local", "native", "stream", "stage"),
    ("pipeline", "preset"): ("tuned", "naive"),
    ("pipeline", "cache"): ("none", "memory", "disk"),
    ("pipeline", "tokenize"): ("pretokenized", "inline"),
    ("train", "strategy"): ("default", "one_device", "mirrored", "multi_worker", "tpu"),
    ("train", "precision"): ("float32", "mixed_float16", "mixed_bfloat16"),
}

# Lower bounds for numbers (inclusive)
MINIMUM = {
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
    ("train", "batch_size"): 1,
    ("train", "steps"): 1,
    ("train", "warmup_steps"): 0,
    ("train", "log_every"): 1,
    ("profile", "host_tracer_level"): 0,
    ("profile", "device_tracer_level"): 0,
    ("profile", "probe_steps"): 0,
    ("profile", "probe_blocks"): 1,
    ("model", "num_labels"): 2,
}


def parse_window(spec: str, total_steps: int) -> tuple[int, int] | None:
    spec = (spec or "").strip().lower()
    if spec in ("", "none", "off", "0"):
        return None
    try:
        a, b = spec.split(":")
        start, stop = int(a), int(b)
    except ValueError:
        raise UsageError(f"--set profile.steps={spec!r}: expected START:STOP, e.g. 20:40") from None
    if not (0 <= start < stop):
        raise UsageError(f"--set profile.steps={spec!r}: need 0 <= START < STOP")
    if stop > total_steps:
        raise UsageError(
            f"--set profile.steps={spec!r}: window ends after the last step (train.steps={total_steps})"
        )
    return start, stop


# ---- coercion ---------------------------------------------------------------------------------------------

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _coerce(key: str, typ: Any, value: Any) -> Any:
    """Convert `value` (from YAML or the command line) to the field type, or raise UsageError naming `key`."""
    shown = f"--set {key}={value!r}"
    if typ in ("IntOrAuto",) or typ is IntOrAuto or (get_origin(typ) is Union and set(get_args(typ)) == {int, str}):
        if isinstance(value, str) and value.strip().lower() in (AUTOTUNE, "auto", "-1"):
            return AUTOTUNE
        if isinstance(value, bool):
            raise UsageError(f"{shown}: expected an integer or 'autotune'")
        try:
            return int(str(value).strip()) if not isinstance(value, int) else value
        except ValueError:
            raise UsageError(f"{shown}: expected an integer or 'autotune'") from None
    if typ in (bool, "bool"):
        if isinstance(value, bool):
            return value
        s = str(value).strip().lower()
        if s in _TRUE:
            return True
        if s in _FALSE:
            return False
        raise UsageError(f"{shown}: expected true or false")
    if typ in (int, "int"):
        if isinstance(value, bool):
            raise UsageError(f"{shown}: expected an integer")
        if isinstance(value, int):
            return value
        try:
            return int(str(value).strip())
        except ValueError:
            raise UsageError(f"{shown}: expected an integer") from None
    if typ in (float, "float"):
        if isinstance(value, bool):
            raise UsageError(f"{shown}: expected a number")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise UsageError(f"{shown}: expected a number") from None
    if typ in (str, "str"):
        if isinstance(value, (dict, list)):
            raise UsageError(f"{shown}: expected a string")
        return "" if value is None else str(value)
    raise AssertionError(f"unhandled type {typ!r} for {key}")


def _field_types(cls) -> dict[str, Any]:
    return {f.name: f.type for f in fields(cls)}


def known_keys() -> list[str]:
    """All `section.key` names accepted by --set."""
    return [f"{s}.{k}" for s, cls in _SECTION_CLASSES.items() for k in _field_types(cls)]


def _apply(values: dict[str, dict[str, Any]], key: str, raw: Any) -> None:
    if "." not in key:
        raise UsageError(f"--set {key}: expected section.key=value (e.g. train.batch_size=64)")
    section, name = key.split(".", 1)
    if section not in _SECTION_CLASSES:
        raise UsageError(f"--set {key}: unknown section {section!r} (known: {', '.join(_SECTION_CLASSES)})")
    types = _field_types(_SECTION_CLASSES[section])
    if name not in types:
        close = [k for k in types if k.startswith(name[:3])]
        hint = f"; did you mean {section}.{close[0]}?" if close else ""
        raise UsageError(f"--set {key}: unknown key{hint}")
    values.setdefault(section, {})[name] = _coerce(key, types[name], raw)


def _validate(cfg: RunConfig) -> None:
    for (section, name), allowed in CHOICES.items():
        v = getattr(getattr(cfg, section), name)
        if v not in allowed:
            raise UsageError(f"--set {section}.{name}={v!r}: expected one of {', '.join(allowed)}")
    for (section, name), lo in MINIMUM.items():
        v = getattr(getattr(cfg, section), name)
        if v == AUTOTUNE:
            continue
        if v < lo:
            raise UsageError(f"--set {section}.{name}={v!r}: must be >= {lo}")
    if not 0.0 < cfg.data.masked_lm_prob < 1.0:
        raise UsageError(f"--set data.masked_lm_prob={cfg.data.masked_lm_prob!r}: must be in (0, 1)")
    if not 0.0 < cfg.profile.au_threshold <= 1.0:
        raise UsageError(f"--set profile.au_threshold={cfg.profile.au_threshold!r}: must be in (0, 1]")
    if cfg.data.max_predictions > cfg.data.seq_len:
        raise UsageError(
            f"--set data.max_predictions={cfg.data.max_predictions}: must not exceed data.seq_len={cfg.data.seq_len}"
        )
    parse_window(cfg.profile.steps, cfg.train.steps)
    uri = cfg.data.uri
    if uri and "://" in uri:
        scheme = uri.split("://", 1)[0].lower()
        if scheme not in ("file", "gs", "az"):
            from tfbertperf.redact import redact_text

            raise UsageError(f"--data {redact_text(uri)}: unknown URI scheme {scheme!r} (use a path, file://, gs:// or az://)")


def resolve_workload(name_or_file: str | None) -> tuple[str, dict]:
    """Return (workload name, its YAML mapping).  A name is looked up in tfbertperf/workloads/."""
    if not name_or_file:
        return "default", {}
    p = Path(name_or_file)
    if not p.suffix and not p.exists():
        p = WORKLOAD_DIR / f"{name_or_file}.yaml"
    if not p.is_file():
        known = sorted(x.stem for x in WORKLOAD_DIR.glob("*.yaml"))
        raise UsageError(f"--workload {name_or_file}: no such workload file or name (known: {', '.join(known)})")
    try:
        doc = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise UsageError(f"--workload {p}:{where} is not valid YAML") from None
    if not isinstance(doc, dict):
        raise UsageError(f"--workload {p}: expected a mapping of sections")
    return doc.pop("workload", p.stem), doc


def load_config(
    workload: str | None = None,
    data_uri: str | None = None,
    sets: list[str] | tuple[str, ...] = (),
    overrides: dict[str, Any] | None = None,
) -> RunConfig:
    """Build a validated RunConfig.

    Args:
      workload: a workload name (tfbertperf/workloads/NAME.yaml) or a YAML file path.
      data_uri: shorthand for `--set data.uri=…`.
      sets: `section.key=value` strings, applied in order.
      overrides: `{"section.key": value}` applied last (for programmatic use and tests).
    Raises:
      UsageError naming the culprit key/value/file.
    """
    name, doc = resolve_workload(workload)
    values: dict[str, dict[str, Any]] = {}
    for section, body in doc.items():
        if section not in _SECTION_CLASSES:
            raise UsageError(f"--workload {workload}: unknown section {section!r}")
        if not isinstance(body, dict):
            raise UsageError(f"--workload {workload}: section {section!r} must be a mapping")
        for k, v in body.items():
            _apply(values, f"{section}.{k}", v)
    if data_uri:
        _apply(values, "data.uri", data_uri)
    for s in sets:
        if "=" not in s:
            raise UsageError(f"--set {s}: expected section.key=value")
        k, v = s.split("=", 1)
        _apply(values, k.strip(), v.strip())
    for k, v in (overrides or {}).items():
        _apply(values, k, v)
    sections = {s: cls(**values.get(s, {})) for s, cls in _SECTION_CLASSES.items()}
    cfg = RunConfig(workload=str(name), **sections)
    _validate(cfg)
    return cfg


def config_from_dict(d: dict) -> RunConfig:
    """Rebuild a RunConfig from `to_dict()` output (e.g. a report's config block)."""
    d = dict(d)
    name = d.pop("workload", "default")
    sets = {f"{s}.{k}": v for s, body in d.items() if isinstance(body, dict) for k, v in body.items()}
    cfg = load_config(overrides=sets)
    return dataclasses.replace(cfg, workload=name)
