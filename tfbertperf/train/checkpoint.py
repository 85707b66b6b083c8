"""Checkpoints and resume (`train.checkpoint_every`, `tfbertperf run --resume RUN_DIR`).

Every N steps the loop saves a tf.train.Checkpoint of the model, the optimizer and the input iterator (tf.data
saves its position, shuffle buffer and prefetched elements, so a resumed run reads exactly the batches the
uninterrupted run would have read), plus `state.json`: the steps done and what the loop measured so far (losses,
step times).  Layout, under `<run dir>/checkpoints/`:

    step-00000040/ckpt.index, ckpt.data-…, state.json     one directory per checkpoint (the last KEEP kept)
    latest.json                                           {"step": 40, "dir": "step-00000040"}

Atomic: a checkpoint is written into a hidden temporary directory, fsynced, renamed to its final name, and only
then does `latest.json` (itself written to a temporary name and renamed) point at it.  A run killed at any
moment leaves either the previous checkpoint or the new one as "latest", never a half-written one; stray
temporary directories are ignored and removed on the next save.

Pipelines that tf.data cannot save (a `from_generator` source: data.mode=stream) are checkpointed without the
iterator; on resume the loop then fast-forwards a fresh iterator by the steps done (`Restored.skip_batches`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from tfbertperf.errors import UsageError
from tfbertperf.storage.atomic import fsync_dir, write_atomic

CHECKPOINT_DIR = "checkpoints"
LATEST = "latest.json"
STATE = "state.json"
KEEP = 2


@dataclass
class Restored:
    """What a resumed loop starts from: steps already done and the loop's measurements up to them."""

    step: int = 0
    state: dict = field(default_factory=dict)
    skip_batches: int = 0  # batches to draw from a fresh iterator (the iterator was not in the checkpoint)


def _replace_json(path: Path, doc: dict) -> None:
    write_atomic(path, json.dumps(doc).encode("utf-8"), durable=True)


def latest_step(run_dir: str | os.PathLike) -> int:
    """Steps done by the newest complete checkpoint under run_dir (0 = none)."""
    try:
        return int(json.loads((Path(run_dir) / CHECKPOINT_DIR / LATEST).read_text())["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


class Checkpointer:
    """Saves and restores the loop's state; `every` = 0 saves nothing (restore still works)."""

    def __init__(self, run_dir: str | os.PathLike, every: int, model, optimizer, iterator) -> None:
        import tensorflow as tf

        self.dir = Path(run_dir) / CHECKPOINT_DIR
        self.every = int(every or 0)
        self._model, self._optimizer = model, optimizer
        # Keras 3 does not track its layers' seed-generator states (dropout's RNG) in a tf.train.Checkpoint of the
        # model: they are listed explicitly, or a resumed run would draw other dropout masks.
        self._seeds = [v for v in model.variables if not v.trainable]
        self._full = tf.train.Checkpoint(model=model, optimizer=optimizer, iterator=iterator, seeds=self._seeds)
        self._with_iterator = True
        self.saved: list[int] = []

    def due(self, steps_done: int, steps: int) -> bool:
        return self.every > 0 and steps_done % self.every == 0 and 0 < steps_done < steps

    def _tf_checkpoint(self):
        import tensorflow as tf

        if self._with_iterator:
            return self._full
        return tf.train.Checkpoint(model=self._model, optimizer=self._optimizer, seeds=self._seeds)

    def save(self, steps_done: int, state: dict) -> Path:
        """Write checkpoint `steps_done` atomically and point latest.json at it; returns its directory."""
        import tensorflow as tf

        self.dir.mkdir(parents=True, exist_ok=True)
        for stray in self.dir.glob(".tmp-*"):
            shutil.rmtree(stray, ignore_errors=True)
        tmp = self.dir / f".tmp-{steps_done:08d}-{os.getpid()}"
        tmp.mkdir()
        try:
            try:
                self._tf_checkpoint().write(str(tmp / "ckpt"))
            except (tf.errors.OpError, ValueError, TypeError) as e:
                if not self._with_iterator:
                    raise
                # tf.data could not save this pipeline's state (e.g. a Python generator source)
                self._with_iterator = False
                for f in tmp.iterdir():
                    f.unlink()
                self._tf_checkpoint().write(str(tmp / "ckpt"))
                state = {**state, "iterator_not_saved": type(e).__name__}
            doc = {**state, "step": steps_done, "iterator": self._with_iterator}
            with open(tmp / STATE, "w", encoding="utf-8") as f:
                json.dump(doc, f)
            for f in tmp.iterdir():
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
            fsync_dir(tmp)
            final = self.dir / f"step-{steps_done:08d}"
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
            fsync_dir(self.dir)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _replace_json(self.dir / LATEST, {"step": steps_done, "dir": final.name})
        self.saved.append(steps_done)
        for old in sorted(self.dir.glob("step-*"))[:-KEEP]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def restore(self) -> Restored:
        """Load the newest complete checkpoint (model, optimizer, iterator); Restored() when there is none."""
        from tfbertperf.errors import UsageError

        step = latest_step(self.dir.parent)
        if not step:
            return Restored()
        path = self.dir / json.loads((self.dir / LATEST).read_text())["dir"]
        try:
            state = json.loads((path / STATE).read_text())
        except (OSError, ValueError) as e:
            raise UsageError(f"{path}: unreadable checkpoint state ({e})") from None
        self._with_iterator = bool(state.get("iterator", True))
        try:
            self._tf_checkpoint().read(str(path / "ckpt")).assert_existing_objects_matched()
        except (ValueError, AssertionError) as e:
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise UsageError(f"{path}: checkpoint does not match this run's model ({msg})") from None
        return Restored(step=step, state=state, skip_batches=0 if self._with_iterator else step)


def resume_config(run_dir: str, sets: list[str]):
    """(run directory as a Path, its RunConfig from config.yaml with `sets` applied) for `run --resume RUN_DIR`."""
    import yaml

    from tfbertperf.config import load_config
    from tfbertperf.redact import REDACTED

    d = Path(run_dir)
    try:
        doc = yaml.safe_load((d / "config.yaml").read_text())
    except (OSError, yaml.YAMLError) as e:
        raise UsageError(f"--resume {run_dir}: no readable config.yaml ({getattr(e, 'strerror', None) or e})") \
            from None
    if (d / "report.json").is_file() and not (d / "INTERRUPTED").is_file():
        raise UsageError(f"--resume {run_dir}: this run finished (report.json); nothing to resume")
    if not latest_step(d):
        raise UsageError(f"--resume {run_dir}: no checkpoint to resume from (runs save them with "
                         "--set train.checkpoint_every=N)")
    flat = {f"{s}.{k}": v for s, body in (doc or {}).items() if isinstance(body, dict)
            for k, v in body.items() if v != REDACTED}
    for s in sets:
        if "=" not in s:
            raise UsageError(f"--set {s}: expected section.key=value")
    cfg = load_config(overrides={**flat, **dict(s.split("=", 1) for s in sets)})
    return d, dataclasses.replace(cfg, workload=str((doc or {}).get("workload") or cfg.workload))
