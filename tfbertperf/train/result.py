"""What a training run hands to the profile/report stages (the contract between train/ and run.py)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TrainResult:
    steps: int  # steps run (all of them are in the step timer)
    global_batch_size: int
    replicas: int
    seq_len: int
    loss_trajectory: list[tuple[int, float]]  # (step, loss) for every step
    final_loss: float
    step_times_ms: list[float]  # wall time of every step (get-next + step), in order
    input_wait_ms: list[float]  # per step: wall time blocked in next(iterator)
    warmup_steps: int  # leading steps excluded from throughput and the step timer summary
    profile_window: tuple[int, int] | None  # (start, stop) steps traced, stop exclusive
    tensorboard_dir: str | None  # logdir holding scalars and plugins/profile/<session>/<host>.xplane.pb
    compute_only_step_ms: float | None = None  # what-if probe: mean step time on a cached in-memory batch
    probe_steps: int = 0
    metrics: dict = field(default_factory=dict)  # task metrics at the end, e.g. {"mlm_accuracy": 0.12}
    extra: dict = field(default_factory=dict)  # anything else worth reporting (per-replica batch, worker index…)
