"""The input ceiling of a run: its pipeline alone after training (data/ceiling.py), the demand the devices put on
it, and the share of the step the pipeline waited on storage reads — what the headroom and the verdict's input
cause are read from."""

from __future__ import annotations


def input_ceiling(cfg, dataset_fn, backend, record_bytes: float, say) -> dict | None:
    """The pipeline alone for profile.ceiling_seconds (None when 0)."""
    from tfbertperf.data.ceiling import measure_ceiling

    seconds = float(cfg.profile.ceiling_seconds or 0.0)
    if seconds <= 0:
        return None
    c = measure_ceiling(lambda: dataset_fn(None), seconds, bytes_read=lambda: backend.metrics.bytes_read,
                        record_bytes=record_bytes)
    say(f"input ceiling: {c['examples_per_sec']:.1f} examples/s, {c['mb_per_sec']:.2f} MB/s "
        f"(pipeline alone, {c['seconds']:.1f} s)")
    return c


def demand_examples_per_sec(result, emulation) -> float | None:
    """What the devices consume: the emulated devices' rate, else global batch ÷ the probe's T_c."""
    if emulation is not None:
        return emulation.demand_examples_per_sec
    if result.compute_only_step_ms:
        return result.global_batch_size * 1000.0 / result.compute_only_step_ms
    return None


def read_share(storage: dict | None, step_mean_ms: float | None) -> float | None:
    """The share of the measured steps' wall time the pipeline waited on reads (storage.read_wait_fraction), else
    the storage reads' time per step ÷ the mean step time in ms (None when either is unknown)."""
    if (storage or {}).get("read_wait_fraction") is not None:
        return storage["read_wait_fraction"]
    per_step = (storage or {}).get("read_ms_per_step")
    return per_step / step_mean_ms if per_step is not None and step_mean_ms else None
