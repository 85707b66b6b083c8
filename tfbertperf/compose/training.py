"""Training for a run: the real model (train/loop.py) or, when `emulate.*` asks for them, emulated devices
(train/emulated_training.py) fed by the same input pipeline, with the host sampler's marks around the steps."""

from __future__ import annotations

import dataclasses

from tfbertperf.compose.hostsampling import MarkingCapture


def dataset_config(cfg, emulation):
    """The config the input pipeline is built from: an emulated run's global batch is accelerators × batch_size."""
    if emulation is None or emulation.global_batch_size == cfg.train.batch_size:
        return cfg
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, batch_size=emulation.global_batch_size))


def train_any(cfg, emulation, dataset_fn, vocab_size: int, tb_dir: str, *, say, strategy, capture, runs_ahead: bool,
              sampler, run_dir: str | None = None, service=None):
    """Train (the real model, or the emulated devices); the sampler marks train_start / train_end, and
    measured_start / measured_end around the steps after warm-up (the span the verdict reads the host over).
    result.extra["measured_span"]: those two perf_counter times (the storage reads' share is taken over it).
    `run_dir`: checkpoints and resume for the real model (train/checkpoint.py); None: none.
    `service`: the run's data/service_session.ServiceSession, told when the training starts and ends."""
    import time

    span: dict[str, float] = {}

    def mark(name: str) -> None:
        span[name] = time.perf_counter()
        if sampler is not None:
            sampler.mark(name)

    if sampler is not None:
        sampler.mark("train_start")
        capture = MarkingCapture(capture, sampler) if capture is not None else None
    if service is not None:
        service.training_started()
    try:
        if emulation is not None:
            from tfbertperf.train.emulated_training import train_emulated

            result = train_emulated(cfg, emulation, dataset_fn, tb_dir, progress=say, strategy=strategy,
                                    capture=capture, mark=mark, vocab_size=vocab_size)
        else:
            from tfbertperf.train.loop import train

            result = train(cfg, dataset_fn, vocab_size, tb_dir, progress=say, strategy=strategy,
                           input_runs_ahead=runs_ahead, capture=capture, run_dir=run_dir, mark=mark)
    finally:
        if sampler is not None:
            sampler.mark("train_end")
    if "measured_start" in span and "measured_end" in span:
        result.extra["measured_span"] = (span["measured_start"], span["measured_end"])
    if service is not None:
        service.training_ended(result)
    return result
