"""Building a RunConfig: defaults → workload YAML → `--data URI` → `--set a.b=v`, coerced and validated once.

A bad key, type or value raises UsageError naming it (with "did you mean" for near-miss keys).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import fields
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import yaml

from tfbertperf.config.schema import (_SECTION_CLASSES, AUTOTUNE, CHOICES, MINIMUM, WORKLOAD_DIR, IntOrAuto,
                                      RunConfig, parse_data_service, parse_window)
from tfbertperf.errors import UsageError

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
    if not cfg.window_is_auto:  # only a window the user wrote can fail to fit; auto follows the run
        parse_window(cfg.profile.steps, cfg.train.steps)
    parse_data_service(cfg.pipeline.data_service)
    if cfg.train.checkpoint_every and cfg.train.strategy == "multi_worker":
        raise UsageError(f"--set train.checkpoint_every={cfg.train.checkpoint_every}: checkpoints are for "
                         "single-process runs (not train.strategy=multi_worker)")
    uri = cfg.data.uri
    if uri and "://" in uri:
        scheme = uri.split("://", 1)[0].lower()
        if scheme not in ("file", "gs", "az"):
            from tfbertperf.redact import redact_text

            raise UsageError(f"--data {redact_text(uri)}: unknown URI scheme {scheme!r} (use a path, file://, gs:// or az://)")
        if scheme == "az" and cfg.data.mode == "native":
            from tfbertperf.redact import redact_text

            raise UsageError(f"--data {redact_text(uri)}: data.mode=native reads through TensorFlow's own filesystem, "
                             "which exists for gs:// only (tensorflow-io's az:// does not load on TF 2.21); "
                             "use data.mode=stream or stage")


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
        doc = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError as e:
        raise UsageError(f"--workload {p}: not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise UsageError(f"--workload {p}: cannot read ({e.strerror})") from None
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
    src = workload if workload and Path(workload).is_file() else f"{WORKLOAD_DIR / str(workload)}.yaml"
    for section, body in doc.items():
        if section not in _SECTION_CLASSES:
            raise UsageError(f"--workload {src}: unknown section {section!r}")
        if not isinstance(body, dict):
            raise UsageError(f"--workload {src}: section {section!r} must be a mapping")
        for k, v in body.items():
            try:
                _apply(values, f"{section}.{k}", v)
            except UsageError as e:  # name the file and its key, not a --set the user never typed
                raise UsageError(str(e).replace("--set ", f"--workload {src}: ", 1)) from None
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
    cfg = _with_init_vocab(RunConfig(workload=str(name), **sections))
    _validate(cfg)
    return _resolve_mode(cfg)


def _resolve_mode(cfg: RunConfig) -> RunConfig:
    """data.mode as it will be in force: remote modes apply to gs:// and az:// only (local files are read
    locally), and remote data with the default `local` is streamed — so the config a report shows is the truth."""
    scheme = cfg.data.uri.split("://", 1)[0].lower() if "://" in cfg.data.uri else "file"
    mode = cfg.data.mode
    if scheme == "file" and mode != "local":
        mode = "local"
    elif scheme in ("gs", "az") and mode == "local":
        mode = "stream"
    if mode == cfg.data.mode:
        return cfg
    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, mode=mode))


def _with_init_vocab(cfg: RunConfig) -> RunConfig:
    """model.init=DIR: the directory must exist; its vocab.txt becomes data.vocab unless one is given, so the
    data are tokenized with the checkpoint's own vocabulary (ids match its embedding rows)."""
    init = cfg.model.init
    if not init:
        return cfg
    if not os.path.isdir(init):
        raise UsageError(f"--set model.init={init}: no such directory (expected a Hugging Face BERT directory: "
                         f"config.json + model.safetensors)")
    vocab = os.path.join(init, "vocab.txt")
    if cfg.data.vocab or not os.path.isfile(vocab):
        return cfg
    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, vocab=vocab))


def config_from_dict(d: dict) -> RunConfig:
    """Rebuild a RunConfig from `to_dict()` output (e.g. a report's config block)."""
    d = dict(d)
    name = d.pop("workload", "default")
    sets = {f"{s}.{k}": v for s, body in d.items() if isinstance(body, dict) for k, v in body.items()}
    cfg = load_config(overrides=sets)
    return dataclasses.replace(cfg, workload=name)
