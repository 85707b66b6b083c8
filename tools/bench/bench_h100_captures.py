"""The three shared H100 captures (../shared/fixtures/profiles/h100, issue 22): the truth measured in the same
process without the profiler, `tfbertperf analyze` (device idle time), and xprof's own input_pipeline_analyzer,
side by side.  Prints markdown tables.

    python tools/bench/bench_h100_captures.py

Truth: input_fraction = (T − T_c) ÷ T unprofiled (truth.json); for the stall capture, whose model is the compute
capture's, also the what-if inside the captures: (its profiled step − compute's profiled step) ÷ its profiled step.
Profiler: analyze's estimate of the profiler's cost per step (host events × program_facts.HOST_EVENT_COST_US)
beside what the profiler added in truth (the profiled step − the unprofiled T_ms).
xprof: its step time and its step table (Input, device compute, All others …) from input_pipeline_analyzer,
as `analyze` keeps them under xprof_step_time_ms / xprof_breakdown_ms (the H2D copies measured on the device
planes moved out of its categories, as before issue 22).
With the step file (issue 29): `analyze CAPTURE.xplane.pb.gz --steps FILE`, FILE a step file of truth.json's
unprofiled T blocks — the profiler's cost measured, and the program's shares without the profiler
(attribution.unprofiled), its verdict and advice.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
H100 = ROOT.parent / "shared" / "fixtures" / "profiles" / "h100"
ADVICE_RE = re.compile(r"XLA|jit_compile|train\.jit|mixed precision|mixed_bfloat16|mixed_float16", re.I)


def main() -> int:
    from tfbertperf.analyze import analyze

    truth = json.loads((H100 / "truth.json").read_text())["regimes"]
    rows, xrows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for regime in ("compute", "stall", "h2d"):
            path = Path(tmp) / f"h100-{regime}.xplane.pb"
            path.write_bytes(gzip.decompress((H100 / f"h100-{regime}.xplane.pb.gz").read_bytes()))
            t0 = time.perf_counter()
            doc = analyze(str(path), xprof="always")  # its table below is xprof's own (issue 32: auto skips it)
            secs = time.perf_counter() - t0
            att, tr = doc["attribution"], truth[regime]
            fr, xb = att["fractions"], att.get("xprof_breakdown_ms") or {}
            what_if = ""
            if regime == "stall":
                what_if = f" / {(tr['profiled_step_ms'] - truth['compute']['profiled_step_ms']) / tr['profiled_step_ms']:.0%}"
            bad = ADVICE_RE.findall(" ".join(doc["verdict"]["recommendations"]))
            tran = att.get("transfer") or {}
            rate = f"{tran['effective_gb_per_s']} GB/s {tran['memory']}" if tran.get("memory") else "—"
            est = att["profiler_cost"].get("added_ms_per_step_estimate")
            added = tr["profiled_step_ms"] - tr["T_ms"]  # what the profiler added: captured − unprofiled
            cost = f"{est:.1f} / {added:.1f} ({added / est:.1f}× the estimate)" if est else "—"
            rows.append(f"| {regime} | {tr['input_fraction']:.0%}{what_if} | {tr['profiled_step_ms']:.1f} | "
                        f"{att['step_time_ms']:.1f} | {fr['input']:.1%} | {fr['host_to_device']:.1%} | "
                        f"{fr['kernel_launch']:.1%} | {fr['device_compute']:.1%} | {doc['verdict']['bottleneck']} | "
                        f"{rate} | {cost} | {', '.join(bad) or 'none'} | {secs:.1f} |")
            xs = att.get("xprof_step_time_ms") or 0
            xrows.append(f"| {regime} | {xs:.1f} | " + " | ".join(
                f"{(xb.get(k) or 0) / xs:.1%}" if xs else "—" for k in ("input", "host_to_device", "device_compute",
                                                                      "kernel_launch", "other")) +
                f" | {att.get('xprof_input_conclusion', '')[:70]} |")
    print("| capture | truth input / h2d share | truth step in capture (ms) | analyze step (ms) | input | "
          "host→device | kernel launch | device compute (AU) | verdict | transfer | profiler ms/step: estimated / "
          "truth | XLA / precision advice | analyze s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print()
    print()
    print(with_step_file(truth))
    print()
    print("| capture | xprof step (ms) | xprof input | xprof h2d (device copies) | xprof device compute | "
          "xprof kernel launch | xprof other | xprof's conclusion |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(xrows))
    return 0


def with_step_file(truth: dict) -> str:
    """The table of analyze with truth.json's unprofiled steps as the step file (module docstring)."""
    from tfbertperf.analyze import analyze
    from tfbertperf.profile import stepfile

    out = ["| capture | unprofiled step (truth, ms) | profiler cost measured (ms/step) | without the profiler: "
           "input / host→device / kernel launch / device busy (AU) | truth input / h2d share | verdict | advice |",
           "|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for regime in ("compute", "stall", "h2d"):
            tr = truth[regime]
            steps = Path(tmp) / f"{regime}.json"
            stepfile.write(steps, stepfile.document(tr["T_blocks_ms"], written_by="truth.json T_blocks_ms"))
            doc = analyze(str(H100 / f"h100-{regime}.xplane.pb.gz"), steps=str(steps))
            att = doc["attribution"]
            u = att["unprofiled"]["fractions"]
            out.append(f"| {regime} | {doc['step_file']['unprofiled_step_ms']:.1f} | "
                       f"{att['profiler_cost']['added_ms_per_step']:.1f} | {u['input']:.1%} / "
                       f"{u['host_to_device']:.1%} / {u['kernel_launch']:.1%} / {u['device_compute']:.1%} | "
                       f"{tr['input_fraction']:.0%} | {doc['verdict']['bottleneck']} | "
                       f"{' / '.join(r[:60] for r in doc['verdict']['recommendations'])} |")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
