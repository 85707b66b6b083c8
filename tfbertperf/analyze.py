"""`tfbertperf analyze PATH` — step-time attribution for any TF program's profile.

PATH is a TensorBoard logdir (the newest `plugins/profile/<session>/` is used; `--session` picks another), a
session directory, or `.xplane.pb` files.  The program must have step markers:
`with tf.profiler.experimental.Trace("train", step_num=i, _r=1):` around `next(iterator)` + the step.
Prints a table (category, ms/step, %) per host and combined, and a verdict line; `--json` prints the
attribution/verdict document (the same sections as report.json).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from tfbertperf.errors import UsageError, cli_entry

ROW_LABELS = {
    "input": "input (blocked wait)",
    "host_to_device": "host→device",
    "device_compute": "device compute",
    "host_compute": "host compute",
    "kernel_launch": "kernel launch",
    "device_to_device": "device→device",
    "collectives": "collectives",
    "output": "output",
    "compile": "compile",
    "other": "other",
}


def format_table(att: dict, title: str) -> str:
    """Attribution block → text table (category, ms/step, %), nonzero categories only, then the input figures."""
    lines = [f"{title}: {att['steps_profiled']} steps, {att['step_time_ms']:.2f} ms/step",
             f"  {'category':<24}{'ms/step':>10}{'%':>8}"]
    for cat, label in ROW_LABELS.items():
        ms, fr = att["breakdown_ms"][cat], att["fractions"][cat]
        if ms > 0.0005 or cat in ("input", "other"):
            lines.append(f"  {label:<24}{ms:>10.2f}{fr * 100:>7.1f}%")
    lines.append(f"  {'input share, direct':<24}{'':>10}{att['input_bound_fraction'] * 100:>7.1f}%")
    if att.get("input_cost_estimate_fraction") is not None:
        lines.append(f"  {'input share, + stolen CPU':<24}{'':>10}{att['input_cost_estimate_fraction'] * 100:>7.1f}%"
                     f"   (blocked wait + CPU the pipeline took from compute on {att.get('cores_seen')} cores)")
    if att.get("input_cost_fraction") is not None:
        lines.append(f"  {'input cost, what-if':<24}{'':>10}{att['input_cost_fraction'] * 100:>7.1f}%")
    ops = att.get("input_ops_us") or {}
    if any(ops.values()):
        lines.append("  input ops µs/step: " + ", ".join(f"{k} {v:.0f}" for k, v in ops.items()))
    return "\n".join(lines)


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


def analyze(path, session: str | None = None, trace: bool = True) -> dict:
    """Attribution document for a profile PATH (see module docstring): attribution, verdict, AU, hosts.

    When PATH is one of our run directories, its report.json supplies the config (advice names its knobs),
    the storage metrics, the steady step time and the what-if probe (input_cost_fraction)."""
    from tfbertperf.profile import attribution, xprof_tools

    xplanes = xprof_tools.find_xplanes(path, session=session)
    report = read_run_report(path)
    kw = {}
    if report:
        kw["config"] = report.get("config")
        kw["storage"] = report.get("storage")
        T = ((report.get("throughput") or {}).get("step_time_ms") or {}).get("mean")
        icf = (report.get("attribution") or {}).get("input_cost_fraction")
        if T:
            kw["step_time_ms"] = T
            if icf is not None:
                kw["compute_only_step_ms"] = T * (1.0 - icf)
    doc = attribution.attribute(xplanes, trace=trace, **kw)
    doc["profile"] = {"session": xplanes[0].parent.name, "xplanes": [str(x) for x in xplanes],
                      "run_report": bool(report)}
    return doc


def validate(report: dict, doc: dict, progress: bool = True) -> dict:
    """Re-run our run with its top recommendation applied, next to a re-run of the baseline (same process, same
    machine state), and measure the speedup = baseline median step ÷ new median step."""
    from tfbertperf.config import load_config
    from tfbertperf.run import run

    acts = [a for a in (doc["verdict"].get("actions") or []) if a.get("set")]
    if not acts:
        raise UsageError("--validate: the verdict has no recommendation that maps to --set overrides")
    top = acts[0]
    from tfbertperf.redact import REDACTED

    # Values redacted in the report (secrets, or keys whose names look like one) fall back to their defaults.
    flat = {f"{s}.{k}": v for s, body in report["config"].items() if isinstance(body, dict)
            for k, v in body.items() if v != REDACTED}
    base_cfg = load_config(overrides=flat)
    new_cfg = load_config(overrides={**flat, **dict(x.split("=", 1) for x in top["set"])})
    out = {"advice": top["advice"], "set": top["set"]}
    for name, cfg in (("baseline", base_cfg), ("recommended", new_cfg)):
        if progress:
            print(f"tfbertperf analyze --validate: {name} run …", file=sys.stderr, flush=True)
        run_dir, rep = run(cfg, progress=False)
        out[f"{name}_step_ms"] = rep["throughput"]["step_time_ms"]["p50"]
        out[f"{name}_run"] = str(run_dir)
    out["speedup"] = round(out["baseline_step_ms"] / out["recommended_step_ms"], 4)
    return out


@cli_entry
def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="tfbertperf analyze", description=__doc__.splitlines()[0])
    p.add_argument("path", nargs="+", help="TensorBoard logdir, profile session dir, or .xplane.pb file(s)")
    p.add_argument("--session", help="session directory name under plugins/profile (default: newest)")
    p.add_argument("--json", action="store_true", help="print the attribution/verdict JSON document")
    p.add_argument("--validate", action="store_true",
                   help="our runs only (PATH = a run directory): re-run with the top recommendation next to a "
                        "baseline re-run and report the measured speedup")
    p.add_argument("--no-trace", action="store_true",
                   help="skip the trace-based stolen-CPU estimate (faster on very large profiles)")
    a = p.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if len(a.path) > 1 and not all(x.endswith(".xplane.pb") for x in a.path):
        raise UsageError(f"{' '.join(a.path)}: give one logdir/session dir, or several .xplane.pb files")
    path = a.path if len(a.path) > 1 else a.path[0]
    if sys.stderr.isatty():  # progress for people; logs and error checks see only the result or one error line
        print("tfbertperf analyze: converting the profile with xprof …", file=sys.stderr, flush=True)
    doc = analyze(path, session=a.session, trace=not a.no_trace)
    if a.validate:
        report = read_run_report(path)
        if not report:
            raise UsageError(f"--validate {path}: not a tfbertperf run directory (no report.json)")
        doc["validation"] = validate(report, doc, progress=sys.stderr.isatty())
    if a.json:
        print(json.dumps(doc, indent=2, sort_keys=False))
        return 0
    hosts = doc["hosts"]
    for host, att in hosts.items():
        print(format_table(att, f"host {host}"))
    if len(hosts) > 1:
        print(format_table(doc["attribution"], f"combined ({len(hosts)} hosts)"))
    print(f"AU {doc['accelerator_utilization']:.1%}   verdict: {doc['verdict']['summary']}")
    for r in doc["verdict"]["recommendations"]:
        print(f"  → {r}")
    v = doc.get("validation")
    if v:
        print(f"validated: {v['advice']}: median step {v['baseline_step_ms']:.1f} → {v['recommended_step_ms']:.1f} ms "
              f"= {v['speedup']:.2f}× (baseline {v['baseline_run']}, recommended {v['recommended_run']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
