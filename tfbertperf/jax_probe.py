"""The measured what-if for JAX training — a loop you write (`tfbertperf.jax_steps.StepTimer(probe=True)`) or Keras
on its JAX backend (tfbertperf/keras_jax.py): T_c is the same jitted step fed one cached batch on the device, in
blocks through the steady steps, as `tfbertperf.keras.ProfileCallback(probe=True)` measures it for a TensorFlow fit
(the plan, settle, blocks, step file and figures are that callback's: train/probe.py, profile/probe_record.py).

JAX state is values, not variables: a block runs on a copy of the state (`jnp.array(copy=True)` of every leaf, so
that a step that donates its state consumes the copy, never the loop's own), and the copy is dropped after the
block.  The loop goes on from the state it holds, which the probe never touched: nothing is restored, and the
training is unchanged.  The cached batch is a batch the loop hands over at the last warm-up step, put on the device
once (`jax.device_put`: a NumPy batch to the default device; a `jax.Array` already placed or sharded stays as it
is), so T_c holds no host→device copy.  `to_end()` moves every block after the loop's last step (Keras-JAX under a
tf.data prefetch that sizes its own buffer: profile/autotuned_prefetch.py).
"""

from __future__ import annotations

from typing import Callable

from tfbertperf.profile.probe_record import after_fit, auto_stop, excluded_steps, what_if_record
from tfbertperf.train import recovery
from tfbertperf.train.probe import (PROBE_SETTLE_STEPS, PROBE_WARMUP_STEPS, SETTLE_MAX_STEPS, plan_for, settle_ms,
                                    time_block)


class JaxProbe:
    """The probe's plan and what it measured; `StepTimer` calls it around the loop's steps."""

    def __init__(self, auto: bool, probe_steps: int, probe_blocks: int, probe_ci95: float, wait_each: bool) -> None:
        self.auto, self.probe_steps, self.probe_blocks, self.ci95 = auto, probe_steps, probe_blocks, probe_ci95
        self.wait_each = wait_each
        self.plan: list[tuple[int, int]] | None = None
        self.blocks_at: dict[int, int] = {}  # the plan as step → timed steps (looked up every step)
        self.warmup, self.batch, self.grabbed_at, self.stopped = 0, None, None, None
        self.total, self.traced = 0, None
        self.ran: list[tuple[int, int]] = []
        self.step_times_ms: list[float] = []
        self.tail: list[int] = []  # to_end(): the blocks' sizes, run back to back after the last step

    def make_plan(self, steps: int, warmup_steps: int, traced) -> None:
        """Plan the blocks for a run of `steps` steps captured over `traced` (train/probe.py plan_for)."""
        if steps <= 0:
            raise ValueError("probe=True needs the number of training steps (total_steps=N)")
        self.warmup, self.plan = plan_for(steps, warmup_steps, traced, self.auto, self.probe_steps, self.probe_blocks)
        self.total, self.traced = steps, traced
        self.blocks_at = dict(self.plan)

    def to_end(self) -> None:
        """Run every planned block after the loop's last step, back to back (the pipeline refilled before the
        first only), instead of through the steady steps."""
        self.tail, self.blocks_at = [n for _, n in self.plan or ()], {}

    def wants(self, step: int) -> bool:
        """Whether keep() would keep a batch handed over at `step`."""
        return self.plan is not None and self.batch is None and step >= max(1, self.warmup - 1)

    def keep(self, batch, step: int) -> bool:
        """Cache `batch` on the device as the probe's input, once, from the last warm-up step on (not step 0: the
        step after it would hold the loop's own first compile).  Returns whether this call kept it."""
        if not self.wants(step):
            return False
        self.batch, self.grabbed_at = self.place(batch), step
        return True

    def place(self, batch):
        """The batch as the blocks feed it: on the default device, once."""
        import jax

        return jax.device_put(batch)

    def block(self, step_fn: Callable, state, step: int, real_ms: list[float], summary: Callable[[], dict | None],
              wait: Callable, settle: bool = True, last: bool = False) -> None:
        """Run the block planned before `step`, if any: `step_fn(state, batch)` returns the new state first (a tuple
        or list whose first item is it); `state` the loop's state now (or a callable that returns it, called only
        when a block runs); `summary()` the step file's summary so far (the auto probe's rule to stop); `last`: the
        loop has ended (at `step`, perhaps before its planned end: to_end's blocks run then)."""
        if self.tail and (last or step >= self.total):  # to_end(): every block now
            sizes, self.tail = self.tail, []
            for k, n in enumerate(sizes):
                self.blocks_at = {step: n}
                self.block(step_fn, state, step, real_ms, summary, wait, settle=k == 0, last=True)
            return
        n = self.blocks_at.get(step)
        if not n or self.batch is None:
            return
        if step < self.total and not last and not recovery.ready(real_ms, self.ran, self.warmup, self.traced,
                                                                 self.total):
            recovery.postpone(self.blocks_at, step, self.total, self.traced)  # the last block's recovery runs on
            return
        if self.auto and self.stopped is None:
            self.stopped = auto_stop(summary(), self.ran, self.ci95)
        if self.stopped is not None:
            return
        self.step_times_ms += self.timed(step_fn, state, n, wait, settle_ms(real_ms, self.warmup) if settle else 0)
        self.ran.append((step, n))

    def timed(self, step_fn: Callable, state, n: int, wait: Callable, settle: float) -> list[float]:
        """One block's `n` timed steps, ms, after its untimed ones (train/probe.py time_block; `settle` ms of them
        at least): JAX's step on a copy of the state (module docstring)."""
        import jax
        import jax.numpy as jnp

        held = [jax.tree.map(lambda a: jnp.array(a, copy=True), state() if callable(state) else state)]
        feed = self.batch

        def one():  # waited for by its other outputs (the loss, the logs), as the loop's own step is
            out = step_fn(held[0], feed)
            held[0] = out[0]
            return out[1:] or out[0]

        return time_block(one, wait, n, PROBE_WARMUP_STEPS if not self.ran else PROBE_SETTLE_STEPS, settle,
                          SETTLE_MAX_STEPS, self.wait_each,
                          floor_ms=recovery.settled_floor(self.step_times_ms, [k for _, k in self.ran]))

    def record(self, step_ms: list[float]) -> dict:
        """The step file's probe part (StepTimer.document's keywords) after the steps `step_ms`; {} when not
        planned."""
        if self.plan is None:
            return {}
        return {"what_if": what_if_record(self.step_times_ms, self.ran, self.auto, self.ci95, len(self.plan),
                                          self.stopped),
                "excluded_steps": excluded_steps(self.ran, step_ms, self.warmup, self.traced, self.grabbed_at),
                "warmup_steps": self.warmup}

    def result(self, summary: dict | None, steps: int, traced, who: str = "StepTimer",
               run: str = "run") -> tuple[dict | None, str | None]:
        """(what_if, warning) at the end (profile/probe_record.py after_fit), worded for `who` measuring a `run`."""
        return after_fit(summary, taken=self.batch is not None, ran=self.ran, stopped=self.stopped, steps=steps,
                         warmup=self.warmup, traced=traced, probe_steps=self.probe_steps,
                         target=self.ci95 if self.auto else None, who=who, run=run)
