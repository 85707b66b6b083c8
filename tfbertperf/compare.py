"""`tfbertperf compare` — the same attribution side by side across storage backends, pipeline settings,
strategies, precisions or machines, repeated so that a difference can be told from the machine's drift.

    tfbertperf compare --matrix pipeline.preset=naive,tuned [--matrix data.read_latency_ms=0,20] [--repeat 3]
    tfbertperf compare --scenario notebook-vs-cloud-vm [--set train.steps=40]      # a named comparison (data)
    tfbertperf compare --reports runs/A/report.json other-machine/report.json      # existing runs, e.g. two machines

Each cell is a separate `tfbertperf run` process (fresh TF state: precision policies and strategies are
process-global), run `--repeat` times round-robin (A B C A B C …), all under one comparison directory, so
`tensorboard --logdir <that dir>` shows every run.  A failed cell stays in the tables with its one-line error; the
others still run, and the exit status is 1.  Output: index.html (self-contained page), comparison.json,
comparison.md, plots/.  Scenarios live in tfbertperf/scenarios/NAME.yaml (question, common --set, cells).
"""

from __future__ import annotations

import datetime as _dt
import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from tfbertperf.cliargs import Parser, add_run_arguments
from tfbertperf.config import load_config
from tfbertperf.errors import UsageError, cli_entry, process_main
from tfbertperf.report.comparison import load_report, write_comparison
from tfbertperf.report.markdown import comparison_markdown

SCENARIOS = Path(__file__).parent / "scenarios"


def parse_matrix(items: list[str]) -> list[tuple[str, list[str]]]:
    """['a.b=1,2', 'c.d=x'] → [('a.b', ['1','2']), ('c.d', ['x'])]; every key and value is validated."""
    axes = []
    for it in items:
        if "=" not in it or not it.split("=", 1)[0].strip():
            raise UsageError(f"--matrix {it!r}: expected section.key=v1,v2,...")
        k, v = it.split("=", 1)
        vals = [x.strip() for x in v.split(",") if x.strip()]
        if not vals:
            raise UsageError(f"--matrix {it}: no values (an empty axis makes an empty matrix)")
        for x in vals:  # fail before the first run, naming the bad key or value
            _check_set(f"{k.strip()}={x}", f"--matrix {it}")
        axes.append((k.strip(), vals))
    return axes


def _check_set(kv: str, where: str) -> None:
    k, v = kv.split("=", 1)
    if k.strip() == "data.uri":
        return  # the URI is checked by the run itself (a missing one makes a failed cell, not a refused matrix)
    try:
        load_config(overrides={k.strip(): v})
    except UsageError as e:
        raise UsageError(f"{where}: {e}") from None


def _short(v: str) -> str:
    return v if len(v) <= 32 else "…" + v[-31:]


def matrix_cells(axes) -> list[dict]:
    cells = []
    for combo in itertools.product(*[[(k, v) for v in vals] for k, vals in axes]):
        cells.append({"label": ", ".join(f"{k.split('.')[-1]}={_short(v)}" for k, v in combo) or "run",
                      "set": [f"{k}={v}" for k, v in combo]})
    return cells


def known_scenarios() -> list[str]:
    return sorted(p.stem for p in SCENARIOS.glob("*.yaml"))


def load_scenario(name: str) -> dict:
    """A scenario by name (tfbertperf/scenarios/NAME.yaml) or YAML path: {name, question, set, cells}."""
    path = Path(name) if name.endswith((".yaml", ".yml")) else SCENARIOS / f"{name}.yaml"
    if not path.is_file():
        raise UsageError(f"--scenario {name}: unknown scenario (known: {', '.join(known_scenarios())})")
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise UsageError(f"--scenario {path}: not readable YAML ({type(e).__name__})") from None
    if not isinstance(doc, dict) or not doc.get("question") or not isinstance(doc.get("cells"), list) \
            or len(doc["cells"]) < 2:
        raise UsageError(f"--scenario {path}: needs a question and at least two cells")
    cells = []
    for c in doc["cells"]:
        if not isinstance(c, dict) or not c.get("label"):
            raise UsageError(f"--scenario {path}: every cell needs a label and a set list")
        cells.append({"label": str(c["label"]), "set": [_expand(str(x)) for x in c.get("set") or []]})
    for kv in list(doc.get("set") or []) + [x for c in cells for x in c["set"]]:
        if "=" not in kv:
            raise UsageError(f"--scenario {path}: {kv!r} is not section.key=value")
        _check_set(kv, f"--scenario {path.stem}")
    return {"name": path.stem, "question": str(doc["question"]).strip(), "set": [_expand(str(x)) for x in doc.get("set") or []],
            "cells": cells, "notes": str(doc.get("notes") or "").strip()}


def _expand(kv: str) -> str:
    """${VAR:-default} and ${VAR} in a scenario's setting, from the environment."""
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}",
                  lambda m: os.environ.get(m.group(1)) or (m.group(2) or ""), kv)


def _one_line_error(lines: list[str], code: int) -> str:
    errs = [ln for ln in lines if ln.startswith("tfbertperf: error:")]
    last = (errs or [ln for ln in lines if ln.strip()] or [""])[-1].strip().replace("tfbertperf: error: ", "", 1)
    return f"exit {code}: {last}" if last else f"exit {code}"


def run_cell(cell: dict, base_args: list[str], out_dir: Path, tag: str, progress: bool) -> tuple[dict | None, str]:
    """One `tfbertperf run` process for a cell → (report, run dir) or (None, one-line error).  Its output goes to
    out_dir/logs/<tag>.log; its progress lines are echoed to stderr."""
    runs_root = out_dir / "runs"
    name = "".join(c if c.isalnum() else "-" for c in cell["label"])[:50] + f"-{tag.rsplit('-', 1)[-1]}"
    sets = [a for kv in cell["set"] for a in ("--set", kv)]
    cmd = [sys.executable, "-m", "tfbertperf.run", *base_args, *sets,
           "--set", f"run.out={runs_root}", "--set", f"run.name={name}"]
    log_path = out_dir / "logs" / f"{tag}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    tail: list[str] = []
    run_dir = None
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, bufsize=1)
        for line in proc.stdout:
            log.write(line)
            tail = (tail + [line.rstrip()])[-40:]
            if line.startswith("[tfbertperf] run directory "):
                run_dir = line.split("run directory ", 1)[1].split(";")[0].strip()
            if progress and line.startswith("[tfbertperf]"):
                sys.stderr.write(f"    {line}")
        code = proc.wait()
    if code != 0:
        return None, _one_line_error(tail, code)
    if not run_dir or not (Path(run_dir) / "report.json").is_file():
        return None, "the run left no report.json"
    return (load_report(run_dir), run_dir), ""


def run_cells(cells: list[dict], base_args: list[str], out_dir: Path, repeat: int, progress=True) -> list[dict]:
    """Run every cell `repeat` times, round-robin (A B C A B C …).  A cell refused as bad input (exit 2) is not
    tried again; other failures are, so a flaky cell shows how often it failed."""
    for c in cells:
        c["runs"], c["errors"] = [], []
    total = repeat * len(cells)
    n = 0
    for rnd in range(1, repeat + 1):
        for i, cell in enumerate(cells, 1):
            n += 1
            if cell["errors"] and cell["errors"][0].startswith("exit 2:"):
                continue
            if progress:
                sys.stderr.write(f"[tfbertperf compare] run {n}/{total} (round {rnd}/{repeat}): {cell['label']}\n")
            res, err = run_cell(cell, base_args, out_dir, f"cell{i}-r{rnd}", progress)
            if res:
                cell["runs"].append(res)
            else:
                cell["errors"].append(err)
                if progress:
                    sys.stderr.write(f"[tfbertperf compare] {cell['label']} failed: {err}\n")
    return cells


def _new_dir(root: str) -> Path:
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out_dir = Path(root) / f"{stamp}-compare"
    i = 0
    while out_dir.exists():
        i += 1
        out_dir = Path(root) / f"{stamp}-compare-{i}"
    return out_dir


@cli_entry
def main(argv=None) -> int:
    p = Parser(prog="tfbertperf compare", description=__doc__.split("\n\n")[0])
    p.add_argument("--matrix", action="append", default=[], metavar="KEY=V1,V2",
                   help="an axis of the run matrix (repeatable; the matrix is their product)")
    p.add_argument("--scenario", metavar="NAME", help=f"a named comparison ({', '.join(known_scenarios())})")
    p.add_argument("--repeat", type=int, default=3, metavar="N",
                   help="runs per cell, interleaved round-robin (default 3)")
    p.add_argument("--reports", nargs="+", metavar="REPORT", help="compare existing report.json files / run directories (not a runs root: e.g. runs/2026*)")
    add_run_arguments(p)  # the part every cell shares
    p.add_argument("--out", default="runs", help="where the comparison directory goes (default ./runs)")
    args = p.parse_args(argv)
    given = [x for x in ("matrix", "scenario", "reports") if getattr(args, x)]
    if len(given) != 1:
        raise UsageError("tfbertperf compare: give one of --matrix KEY=V1,V2 (runs), --scenario NAME or "
                         "--reports A B (existing runs)")
    if args.repeat < 1:
        raise UsageError(f"--repeat {args.repeat}: must be at least 1")
    out_dir = _new_dir(args.out)
    scenario, axes, machines = None, None, False
    if args.reports:
        cells = []
        for r in args.reports:
            rep = load_report(r)
            run_dir = os.path.dirname(os.path.abspath(r)) if r.endswith(".json") else os.path.abspath(r)
            cells.append({"label": rep.get("run_id") or os.path.basename(run_dir), "set": [],
                          "runs": [(rep, run_dir)], "errors": []})
        repeat, machines = 1, True
    else:
        if args.scenario:
            scenario = load_scenario(args.scenario)
            cells = scenario["cells"]
            sets = scenario["set"] + list(args.sets)
            sys.stderr.write(f"[tfbertperf compare] scenario {scenario['name']}: {scenario['question']}\n")
        else:
            axes = parse_matrix(args.matrix)
            cells, sets = matrix_cells(axes), list(args.sets)
        base = (["--workload", args.workload] if args.workload else []) + (["--data", args.data] if args.data else [])
        base += [a for s in sets for a in ("--set", s)]
        load_config(args.workload, args.data, sets)  # validate the common part before any run
        out_dir.mkdir(parents=True)
        repeat = args.repeat
        run_cells(cells, base, out_dir, repeat)
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = write_comparison(out_dir, cells, axes, repeat, scenario, machines)
    print(comparison_markdown(doc))
    if scenario:
        print(f"\nQuestion: {scenario['question']}\nAnswer: {doc['explanation'].get('answer') or 'none'}")
    print(f"\ncomparison: {out_dir / 'index.html'}  (also comparison.json, comparison.md, plots/)")
    print(f"TensorBoard: tensorboard --logdir {out_dir}")
    if doc["failed"] or any(r["status"] == "partial" for r in doc["rows"]):
        bad = [r["label"] for r in doc["rows"] if r["status"] != "ok"]
        sys.stderr.write(f"tfbertperf compare: {len(bad)} of {len(doc['rows'])} cells failed "
                         f"(all or some runs): {', '.join(bad)}\n")
        return 1
    return 0


if __name__ == "__main__":
    process_main(main)
