"""report.json `caveats`: one line for each reason a reader should not take the run's figures at face value —
figures that rest on too few steps, and settings known to be slow on the hardware the run used.  The console
prints them under the headline ("caveat: …"), report.md lists them.

"Too few", with the reasons:
  * MIN_STEADY_STEPS = 10 steady steps (after warm-up, outside the profiled window) behind examples/s and the
    step-time percentiles: with fewer, p90 is simply the slowest step, and one step twice as slow as the rest
    (a garbage collection, a neighbour's burst on a shared VM) moves the mean by 10 % or more.
  * MIN_PROBE_STEPS = 5 timed compute-only steps behind T_c, the what-if input cost: the same reasoning for
    (T − T_c) / T, where a 10 % error in T_c is a 10-point error in the input cost of a compute-bound run.
  * warm-up shortened below train.warmup_steps (train/probe.py short_run_budget), or none at all: the first
    steps trace the graph and warm allocators up; with warm-up 0 the measured steps include the tracing.

Not representative: the profiled window's mean step time differs from the measured steps' by WINDOW_DRIFT (25 %)
or more.  xprof's figures (the category table, its input share, the input-op split) describe the window only;
a pipeline that stalls in bursts — a throttled read every few seconds — can leave the window clean while the
run waits half its time (measured: window 106 ms/step, run 248 ms/step with 5.3 s stalls, truth 54 % input,
xprof 1.4 %).  The step timer and the what-if probe cover the whole run.
"""

from __future__ import annotations

MIN_STEADY_STEPS = 10
MIN_PROBE_STEPS = 5
WINDOW_DRIFT = 0.25
PROBE_SLOWER = 0.05


def caveats(cfg, result, steps_measured: int, environment: dict, steady: list[int] | None = None) -> list[str]:
    """The caveat lines for a finished run (module docstring); [] when none applies.  `steady`: the indices of the
    measured steps (report/build.py steady_steps; None: every step after warm-up)."""
    out: list[str] = []
    warm, asked = int(result.warmup_steps), int(cfg.train.warmup_steps)
    if warm < asked:
        first = ("no warm-up: the measured steps include the first one, which traces the graph" if warm == 0 else
                 f"warm-up shortened from {asked} to {warm} step(s) for a {result.steps}-step run")
        out.append(first)
    if steps_measured < MIN_STEADY_STEPS:
        out.append(f"throughput rests on {steps_measured} steady step(s) (fewer than {MIN_STEADY_STEPS}: p90 is "
                   f"the slowest of them and one slow step moves the mean by 10 % or more); raise train.steps")
    if cfg.profile.probe_steps != 0 and 0 < result.probe_steps < MIN_PROBE_STEPS:  # an int, or "autotune"
        out.append(f"the what-if input cost rests on {result.probe_steps} compute-only probe step(s) (fewer than "
                   f"{MIN_PROBE_STEPS}); raise train.steps (the probe times at most half as many steps as the run)")
    out.extend(probe_caveats(result, steady))
    out.extend(window_caveats(result, steady))
    out.extend(precision_caveats(cfg, environment))
    return out


def probe_caveats(result, steady: list[int] | None = None) -> list[str]:
    """The compute-only probe's step T_c slower than the pipeline-fed step T by PROBE_SLOWER (5 %) or more: the
    what-if input cost (T − T_c) / T is then clamped to 0 and the run called compute-bound, though the figure
    only says that the machine ran slower while the probe ran (drift, other processes) — the input's cost is
    not measured by it (a real gs:// native run: T 314.8 ms, T_c 341.6 ms)."""
    tc = getattr(result, "compute_only_step_ms", None)
    times = result.step_times_ms
    idx = list(steady) if steady is not None else list(range(int(result.warmup_steps), len(times)))
    if not tc or not idx or getattr(result, "extra", {}).get("emulation"):
        return []
    t = sum(times[i] for i in idx) / len(idx)
    if tc < (1 + PROBE_SLOWER) * t:
        return []
    return [f"the compute-only probe's step ({tc:.1f} ms) was slower than the training's ({t:.1f} ms): the what-if "
            f"input cost reads 0 % because the machine ran slower during the probe, not because input is free; "
            f"the step timer's blocked wait and xprof's input share are the figures to read here "
            f"(more probe blocks, profile.probe_blocks, average the drift out)"]


def window_caveats(result, steady: list[int] | None = None) -> list[str]:
    """A profiled window whose mean step time is WINDOW_DRIFT or more away from the measured steps' (module
    docstring).  `steady`: the measured steps' indices (None: every step after warm-up)."""
    w = result.profile_window
    times = result.step_times_ms
    if not w or w[1] > len(times) or w[1] - w[0] < 1:
        return []
    if steady is None:
        steady = range(int(result.warmup_steps), len(times))
    run = [times[i] for i in steady if not (w[0] <= i < w[1])]
    win = times[w[0]:w[1]]
    if len(run) < 3:
        return []
    run_ms, win_ms = sum(run) / len(run), sum(win) / len(win)
    if abs(win_ms - run_ms) < WINDOW_DRIFT * run_ms:
        return []
    side = "faster" if win_ms < run_ms else "slower"
    return [f"the profiled window (steps {w[0]}–{w[1] - 1}, mean {win_ms:.1f} ms/step) is {side} than the measured "
            f"steps (mean {run_ms:.1f} ms/step, slowest {max(run):.0f} ms): xprof's figures describe the window, "
            f"not the run; the step timer and the what-if probe cover the whole run"]


def precision_caveats(cfg, environment: dict) -> list[str]:
    """Reduced precision on a run whose model ran on the CPU (no GPU/TPU seen, no emulated device)."""
    from tfbertperf.profile.accelerator_facts import cpu_bf16_capable

    devices = environment.get("devices") or {}
    on_cpu = not devices.get("gpu_count") and not devices.get("tpu_count") and cfg.emulate.device == "none"
    precision = cfg.train.precision
    if not on_cpu or precision == "float32":
        return []
    if precision == "mixed_float16":
        return ["train.precision=mixed_float16 on a CPU: CPUs have no fast float16 matrix kernels, so each step "
                "converts and runs slower (measured here: 239 vs 165 ms/step, 1.45× slower); use float32"]
    flags = (environment.get("cpu") or {}).get("flags") or {}
    if flags and not cpu_bf16_capable(flags):  # unknown flags: no claim either way
        return ["train.precision=mixed_bfloat16 on a CPU without AVX512-BF16 or AMX: bfloat16 is emulated and "
                "slower than float32 here; use float32"]
    return []


def storage_caveats(storage: dict) -> list[str]:
    """Caveats from the run's storage block: records skipped or shards read anyway with data.skip_corrupt
    (storage.records_skipped, storage.corrupt_shards).  The training then saw fewer examples than the data
    holds, and the damaged shards went through the record-checking reader (storage/integrity.py: Python, one
    record at a time, no batched reads), which is slower than TF's: the input ceiling measured on those shards
    is lower than the sound data's would be."""
    shards = list((storage or {}).get("corrupt_shards") or [])
    if not shards:
        return []
    n = int(storage.get("records_skipped") or 0)
    names = ", ".join(shards[:3]) + (f" and {len(shards) - 3} more" if len(shards) > 3 else "")
    what = (f"{n} damaged record(s) skipped in {len(shards)} shard(s) ({names})" if n else
            f"{len(shards)} shard(s) whose sha256 does not match the manifest read anyway ({names})")
    return [f"data.skip_corrupt: {what}; the record-checking reader those shards go through (Python, record by "
            f"record) is slower than TF's, so the input ceiling is lower than the sound data's would be"]

