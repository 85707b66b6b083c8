"""`tfbertperf analyze PATH` — step-time attribution for any TF program's profile.

PATH is a TensorBoard logdir (the newest `plugins/profile/<session>/` is used; `--session` picks another), a
session directory, or `.xplane.pb` files (gzipped `.xplane.pb.gz` too, read as they are).  Per-step attribution needs step markers:
`with tf.profiler.experimental.Trace("train", step_num=i, _r=1):` around `next(iterator)` + the step (JAX:
`jax.profiler.StepTraceAnnotation("train", step_num=i)`).
Prints a table (category, ms/step, %) per host and combined, the accelerator devices (busy, copies, idle ones),
and a verdict line; `--json` prints the attribution/verdict document (the same sections as report.json, plus
`devices`).  A profile with accelerator planes but no step markers gets the device summary and one line on
stderr saying how to mark steps (exit 0); a host-only profile without markers is an error (exit 2).
A step file beside the capture (`tfbertperf_steps.json`, written by tfbertperf.keras.ProfileCallback or
tfbertperf.jax_steps; profile/stepfile.py; or the callback's at the top of PATH when another profiler took its window),
or `--steps FILE`, gives the unprofiled step time, so the profiler's
cost is measured (captured − unprofiled step) instead of estimated and the verdict is about the program as it
runs without the profiler; with the callback's what-if probe it also gives "input cost (measured)".
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tfbertperf.cliargs import Parser
from tfbertperf.errors import UsageError, cli_entry, process_main
from tfbertperf.profile import unprofiled
from tfbertperf.profile.program_facts import HOST_EVENT_COST_US
from tfbertperf.report.build import INTERRUPTED  # the marker a run stopped by Ctrl-C leaves in its directory



def interrupted_marker(xplane: Path) -> str | None:
    """The INTERRUPTED marker's line when the profile lies inside a run directory that has one, else None."""
    for d in list(Path(xplane).resolve().parents)[:6]:
        f = d / INTERRUPTED
        if f.is_file():
            try:
                return f.read_text().strip() or "interrupted"
            except OSError:
                return "interrupted"
    return None


def read_run_report(path) -> dict | None:
    """report.json of one of our run directories (PATH itself or the run dir above a tensorboard/ logdir)."""
    if isinstance(path, (list, tuple)):
        return None
    p = Path(path)
    for d in (p, p.parent):
        f = d / "report.json"
        if f.is_file():
            try:
                return json.loads(f.read_text())
            except (OSError, json.JSONDecodeError):
                raise UsageError(f"{f}: not a readable report.json") from None
    return None


def step_file(xplanes, steps: str | None, path=None, skipped: list | None = None):
    """The step file's summary (profile/stepfile.py): `steps` when given, else the one beside the capture, else the
    one at the top of the logdir `path` that ProfileCallback leaves when another profiler held its window (Keras'
    `TensorBoard(profile_batch=…)` in the same fit: that capture, under logdir/train, has none beside it, and the
    probe's measured what-if was read by nothing) — only one with no window of its own, written after the capture
    and within its fit's time of it — else None.  A top one that cannot be read is left out, and `skipped` gets a
    line naming it (the console's note: the answer is the capture's alone)."""
    from tfbertperf.profile import stepfile, xprof_tools

    if steps:
        return stepfile.read(steps)
    source = xprof_tools.source_file(xplanes[0])
    found = stepfile.beside(source.parent)
    if not found and path is not None and Path(path).is_dir() and (top := stepfile.beside(path)):
        try:
            doc = json.loads(top.read_text())
            fit_s = (sum(doc.get("step_time_ms") or ()) + sum((doc.get("what_if") or {}).get(
                "compute_only_step_ms") or ())) / 1e3
            after = top.stat().st_mtime - source.stat().st_mtime
        except (OSError, ValueError, TypeError, AttributeError) as e:  # the capture is analyzed without it
            if skipped is not None:
                skipped.append(f"{top}: not a readable step file ({type(e).__name__}), left out: the answer is the "
                               "capture's alone (--steps FILE names one)")
            return None
        if doc.get("profiled_steps") is None and 0 <= after <= fit_s + 120:
            found = top
    return stepfile.read(found) if found else None


def analyze(path, session: str | None = None, trace: bool = True, steps: str | None = None,
            xprof: str = "auto") -> dict:
    """Attribution document for a profile PATH (see module docstring): attribution, verdict, AU, hosts.

    When PATH is one of our run directories, its report.json supplies the config (advice names its knobs),
    the storage metrics, the steady step time and the what-if probe (input_cost_fraction).  A step file
    (`steps`, or tfbertperf_steps.json beside the capture) supplies the unprofiled step time and, when the
    what-if ran, T_c; the document's `step_file` holds its figures (None without one).  xprof: when xprof's
    converter runs ("auto" | "always" | "never"; profile/xprof_attribution.py XPROF_MODES)."""
    from tfbertperf.profile import attribution, devices, xprof_tools

    xplanes = xprof_tools.find_xplanes(path, session=session)
    devs = devices.device_planes(xplanes)  # refuses a damaged file in one line before xprof's converter sees it
    report = read_run_report(path)
    measured = step_file(xplanes, steps, path, skipped := [])
    kw = {}
    if report:
        kw["env_devices"] = (report.get("environment") or {}).get("devices")
        kw["cpu_flags"] = ((report.get("environment") or {}).get("cpu") or {}).get("flags")
        kw["config"] = report.get("config")
        kw["storage"] = report.get("storage")
        # an emulated run: its AU as the devices measured it, and their wait as device compute (as the run did)
        kw["emulated_au"] = (report.get("emulation") or {}).get("au")
        kw["emulated_step_ms"] = (report.get("emulation") or {}).get("step_ms")
        T = ((report.get("throughput") or {}).get("step_time_ms") or {}).get("mean")
        icf = (report.get("attribution") or {}).get("input_cost_fraction")
        if T:
            kw["step_time_ms"] = T
            if icf is not None:
                kw["compute_only_step_ms"] = T * (1.0 - icf)
                kw["input_cost_ci95"] = (report.get("attribution") or {}).get("input_cost_ci95")
    drifted = unprofiled.drifted(measured.drift) if measured else None
    if measured and measured.unprofiled_step_ms and (not drifted or measured.input_cost_fraction is not None):
        # the user's own step times: measured beats any estimate (unless their speed moved around the window)
        kw["step_time_ms"] = T = measured.unprofiled_step_ms
        icf = measured.input_cost_fraction  # paired in time with the blocks (stepfile.py): T_c at T's scale
        kw["compute_only_step_ms"] = None if icf is None else T * (1.0 - icf)
        kw["input_cost_ci95"] = measured.input_cost_ci95
        kw["dataset_prefetch"] = measured.autotuned_prefetch if icf is not None else None
        kw["what_if_after_steps"] = measured.probe_after_steps
    if measured:
        kw["probe_by"] = measured.written_by  # whose probe a "measure longer" action names
    try:
        doc = attribution.attribute(xplanes, trace=trace, xprof=xprof, **kw)
    except attribution.NoStepsError:
        if not any(d["events"] for d in devs):
            raise
        doc = attribution.device_summary(devs, xplanes)
    doc["profile"] = {"session": xplanes[0].parent.name,
                      "xplanes": [str(xprof_tools.source_file(x)) for x in xplanes], "run_report": bool(report)}
    doc["step_file"] = measured.as_dict() if measured else None
    if skipped:
        doc["profile"]["step_file_skipped"] = skipped[0]
    if measured and measured.unprofiled_step_ms and doc.get("attribution"):
        doc["attribution"]["profiler_cost"] = _measured_cost(doc["attribution"], measured, drifted)
        if drifted and doc["attribution"].get("input_cost_estimate_unprofiled_fraction") is not None:
            doc["attribution"]["input_cost_estimate_unprofiled_fraction"] = None  # its step moved around the window
            doc["attribution"].pop("input_cost_estimate_unprofiled_caveat", None)  # a caveat on nothing
    marker = interrupted_marker(xprof_tools.source_file(xplanes[0]))
    if marker or (report or {}).get("incomplete"):
        doc["profile"]["interrupted"] = marker or "interrupted (report.json is marked incomplete)"
    return doc


def _measured_cost(att: dict, measured, drifted: str | None = None) -> dict:
    """The profiler's cost per step from the step file: the capture's step − the unprofiled step (ms); where that
    measures nothing (profile/unprofiled.py: moved, drifted) the estimate stays, and why."""
    captured = float(att["step_time_ms"])
    added = captured - measured.unprofiled_step_ms
    steps, events = f"{measured.unprofiled_steps} unprofiled steps of the step file", att.get("host_events_per_step")
    why = drifted or (unprofiled.not_measured(captured, measured.unprofiled_step_ms, steps)
                      if unprofiled.moved(captured, measured.unprofiled_step_ms) else None)
    if not why and att.get("compute_on") == "host" and unprofiled.slower_than_events(  # a CPU capture (its choice)
            captured, measured.unprofiled_step_ms, events, HOST_EVENT_COST_US):
        why = unprofiled.slower_words(captured, measured.unprofiled_step_ms, events, steps)
    base = {**(att.get("profiler_cost") or {}), "captured_step_ms": round(captured, 3),
            "unprofiled_step_ms": round(measured.unprofiled_step_ms, 3)}
    if why:  # the estimate's basis where the capture gives one (device planes), else this reason
        return {"basis": why, **base, "not_measured": why}
    return {**base, "added_ms_per_step": round(added, 3),
            "added_fraction": round(added / captured, 4) if captured else None,
            "basis": f"measured: the captured step against {measured.unprofiled_steps} unprofiled steps of the "
                     f"step file {measured.path}"}


def _write_tensorboard(doc: dict) -> Path:
    """The answer as TensorBoard summaries beside the capture's runs (report/tensorboard.py): LOGDIR/tfbertperf_answer,
    LOGDIR the folder holding plugins/profile/<session>/; a capture outside a logdir is refused in one line."""
    from tfbertperf.report.tensorboard import ANALYZE_SUBDIR, write_answer

    capture = Path(doc["profile"]["xplanes"][0])
    session = capture.parent
    if session.parent.name != "profile" or session.parent.parent.name != "plugins":
        raise UsageError(f"--tensorboard: {capture} is not inside a TensorBoard logdir (LOGDIR/plugins/profile/"
                         "<session>/); analyze the logdir, or leave --tensorboard out")
    if not doc.get("verdict"):
        raise UsageError(f"--tensorboard: {session}: no verdict to write (the capture has no steps)")
    logdir = session.parent.parent.parent
    return write_answer(logdir, doc, out=logdir / ANALYZE_SUBDIR)


@cli_entry
def main(argv=None) -> int:
    p = Parser(prog="tfbertperf analyze", description=__doc__.splitlines()[0])
    p.add_argument("path", nargs="+", help="TensorBoard logdir, profile session dir, or .xplane.pb file(s)")
    p.add_argument("--session", help="session directory name under plugins/profile (default: newest)")
    p.add_argument("--json", action="store_true", help="print the attribution/verdict JSON document")
    p.add_argument("--steps", metavar="FILE",
                   help="step file (tfbertperf_steps.json: every step's wall time, the profiled window marked, and "
                        "the what-if probe's steps; default: the one beside the capture, if any)")
    p.add_argument("--validate", action="store_true",
                   help="our runs only (PATH = a run directory): re-run with each of up to three recommendations "
                        "that map to --set (or the --advice overrides) next to baseline re-runs, and report each "
                        "measured speedup")
    p.add_argument("--repeat", type=int, default=3, metavar="N",
                   help="--validate: runs per configuration, interleaved round-robin (default 3)")
    p.add_argument("--advice", action="append", default=[], metavar="KEY=V[,KEY=V]",
                   help="--validate these overrides (repeatable: one advice each) instead of the verdict's advice")
    p.add_argument("--xprof", choices=("auto", "always", "never"), default="auto",
                   help="when xprof's input_pipeline_analyzer runs: auto (default) only where its figures are the "
                        "answer or feed it — host compute, no device-idle reading, tf.data input ops; always; "
                        "never. attribution.xprof in --json says whether it ran and why not")
    p.add_argument("--no-trace", action="store_true",
                   help="skip the trace-based stolen-CPU estimate (faster on very large profiles)")
    p.add_argument("--tensorboard", action="store_true",
                   help="also write the answer (headline, verdict, breakdown: Text tab; ms/step and input cost: "
                        "Scalars) into the capture's TensorBoard logdir, as a run of its own: "
                        "LOGDIR/tfbertperf_answer")
    a = p.parse_args(argv)
    from tfbertperf.advice_validation import validate
    from tfbertperf.profile import xprof_tools
    from tfbertperf.report.console import print_analysis

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if len(a.path) > 1 and not all(x.endswith((".xplane.pb", ".xplane.pb.gz")) for x in a.path):
        raise UsageError(f"{' '.join(a.path)}: give one logdir/session dir, or several .xplane.pb files")
    path = a.path if len(a.path) > 1 else a.path[0]
    if sys.stderr.isatty():  # progress for people; logs and error checks see only the result or one error line
        print("tfbertperf analyze: reading the profile …", file=sys.stderr, flush=True)
    doc = analyze(path, session=a.session, trace=not a.no_trace, steps=a.steps, xprof=a.xprof)
    if a.validate:
        report = read_run_report(path)
        if not report:
            raise UsageError(f"--validate {path}: not a tfbertperf run directory (no report.json)")
        if a.repeat < 1:
            raise UsageError(f"--repeat {a.repeat}: must be at least 1")
        sets = [[x.strip() for x in adv.split(",") if x.strip()] for adv in a.advice]
        for adv, s in zip(a.advice, sets):
            if not s or not all("=" in x for x in s):
                raise UsageError(f"--advice {adv!r}: expected section.key=value[,section.key=value]")
        doc["validation"] = validate(report, doc, progress=sys.stderr.isatty(), repeat=a.repeat,
                                     advice_sets=sets or None)
    if doc.get("verdict") and doc.get("steps_marked") is not False:
        from tfbertperf.report.headline import headline

        # the one answer, as a run's console and report open with it (issue 30): the verdict, the one input-cost
        # figure with its source (the step file's measured what-if, else the capture's estimate, else the blocked
        # wait) and the one action that matters most
        doc["headline"] = headline(doc)
    if a.session is None and len(found := xprof_tools.sessions_under(path)) > 1:  # which capture this answer is of
        doc["profile"]["sessions_found"] = len(found)
        print(f"tfbertperf: note: read the newest of {len(found)} captures under {path}: "
              f"{Path(doc['profile']['xplanes'][0]).parent} (--session NAME picks another)", file=sys.stderr)
    if doc["profile"].get("step_file_skipped"):
        print(f"tfbertperf: note: {doc['profile']['step_file_skipped']}", file=sys.stderr)
    if doc["profile"].get("interrupted"):
        print(f"tfbertperf: note: this profile is from an interrupted run ({doc['profile']['interrupted']}): "
              "its window may hold fewer steps than the run planned", file=sys.stderr)
    if doc.get("steps_marked") is False:
        print(f"tfbertperf: note: {doc['note']}", file=sys.stderr)
        for missing in doc.get("missing") or ():
            print(f"tfbertperf: note: {missing}", file=sys.stderr)
    if a.tensorboard:
        doc["tensorboard_answer"] = str(_write_tensorboard(doc))
    if a.json:
        print(json.dumps(doc, indent=2, sort_keys=False))
        return 0
    print_analysis(doc)
    if a.tensorboard:
        print(f"tensorboard: the answer is in {doc['tensorboard_answer']} (Text and Scalars tabs: tensorboard "
              f"--logdir {Path(doc['tensorboard_answer']).parent})")
    return 0


if __name__ == "__main__":
    process_main(main)
