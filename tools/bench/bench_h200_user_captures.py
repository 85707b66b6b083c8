"""The real H200 captures of a user's own JAX loop (tests/fixtures/h200, issue 29): `tfbertperf analyze` from the
capture alone and with StepTimer's step file, beside the truth measured in the same process without the profiler.
Prints markdown tables.

    python tools/bench/bench_h200_user_captures.py

Truth (truth.json): input = (T − T_c) ÷ T from the program's own unprofiled blocks; StepTimer's unprofiled steps
(the step file) are a second reading of T, and `T_c(step file)` is the compute regime's step file.  The advice
is checked against what was measured: the batch what-if (twice the batch on the compute regime) and the float32 ÷
bfloat16 step (retrace).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
H200 = ROOT / "tests" / "fixtures" / "h200"
REGIMES = ("compute", "loader", "retrace", "mixed")


def _short(recs: list[str]) -> str:
    keys = []
    for r in recs:
        low = r.lower()
        keys.append("loader" if "own loader" in low else "batch/launch" if "raise the batch size" in low else
                    "precision" if "precision" in low else low[:30])
    return ", ".join(keys) or "—"


def main() -> int:
    from tfbertperf.analyze import analyze

    truth = json.loads((H200 / "truth.json").read_text())
    t_c_file = json.loads((H200 / "h200-compute.steps.json").read_text())["summary"]["unprofiled_step_ms"]
    print(f"device {truth['device']}, JAX {truth['jax']}: {truth['model']}\n")
    print("| regime | truth input (T / T_c ms) | step file: unprofiled T, input vs its T_c | capture alone: input, "
          "verdict, advice | with step file: input, verdict, advice | profiler cost: measured / estimate ms | "
          "precision, programs |")
    print("|---|---|---|---|---|---|---|")
    for regime in REGIMES:
        tr = truth["regimes"][regime]
        capture, steps = H200 / f"h200-{regime}.xplane.pb.gz", H200 / f"h200-{regime}.steps.json"
        alone = analyze(str(capture))  # no tfbertperf_steps.json beside it: the capture alone
        full = analyze(str(capture), steps=str(steps))
        T_file = json.loads(steps.read_text())["summary"]["unprofiled_step_ms"]
        a, f = alone["attribution"], full["attribution"]
        pc = f["profiler_cost"]
        programs = ", ".join(f"#{p['program_id']} {p['precision']} {p['device_share']:.0%}"
                             for p in f.get("xla_programs") or [])
        truth_cell = (f"{tr['input_fraction']:.1%} ({tr['T_ms']:.1f} / {tr['T_c_ms']:.1f})" if "T_ms" in tr else "—")
        if regime == "retrace":  # its T and T_c are the float32 and bfloat16 steps, not an input cost
            truth_cell = f"— (f32 ÷ bf16 step {tr['T_ms'] / tr['T_c_ms']:.2f}×)"
        input_file = (T_file - t_c_file) / T_file if regime == "loader" else None
        print(f"| {regime} | {truth_cell} | {T_file:.1f} ms" + (f", {input_file:.1%}" if input_file is not None else "")
              + f" | {a['fractions']['input'] + a['fractions']['host_to_device']:.1%}, "
              f"{alone['verdict']['bottleneck']}, {_short(alone['verdict']['recommendations'])} | "
              f"{f['unprofiled']['fractions']['input'] + f['unprofiled']['fractions']['host_to_device']:.1%}, "
              f"{full['verdict']['bottleneck']}, {_short(full['verdict']['recommendations'])} | "
              f"{pc.get('added_ms_per_step', 0):+.2f} / {a['profiler_cost'].get('added_ms_per_step_estimate') or 0:.2f} | "
              f"{f.get('matmul_precision')}: {programs} |")
    truth2 = json.loads((H200 / "truth-run2.json").read_text())["regimes"]
    print("\nRun 2 (truth-run2.json: the loader with and without the Python tracer, and its advice followed):\n")
    print("| capture | truth input (T / T_c ms) | step file: drift, unprofiled T | input share, verdict, advice | "
          "profiler cost | steps: before / window / after (ms) |")
    print("|---|---|---|---|---|---|")
    for name, regime in (("loader", "loader"), ("loader-notrace", "loader"), ("loader-thread", "loader_thread")):
        steps = H200 / f"h200-run2-{name}.steps.json"
        doc = analyze(str(H200 / f"h200-run2-{name}.xplane.pb.gz"), steps=str(steps))
        att, tr, sf = doc["attribution"], truth2[regime], doc["step_file"]
        fr = (att.get("unprofiled") or att)["fractions"]
        pc = att["profiler_cost"]
        cost = (f"{pc['added_ms_per_step']:+.2f} ms measured" if "added_ms_per_step" in pc else
                f"~{pc['added_ms_per_step_estimate']:.2f} ms estimated ({pc['not_measured'][14:60]}…)")
        st = json.loads(steps.read_text())
        w0, w1 = st["profiled_steps"]
        t = st["step_time_ms"]
        mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
        print(f"| {name} | {tr['input_fraction']:.1%} ({tr['T_ms']:.1f} / {tr['T_c_ms']:.1f}) | "
              f"{sf['drift']:.0%}, {sf['unprofiled_step_ms']:.1f} | {fr['input'] + fr['host_to_device']:.1%}, "
              f"{doc['verdict']['bottleneck']}, {_short(doc['verdict']['recommendations'])} | {cost} | "
              f"{mean(t[5:w0]):.1f} / {mean(t[w0:w1]):.1f} / {mean(t[w1:]):.1f} |")
    truth3 = json.loads((H200 / "truth-run3.json").read_text())
    doc = analyze(str(H200 / "h200-run3-loader-notrace.xplane.pb.gz"),
                  steps=str(H200 / "h200-run3-loader-notrace.steps.json"))
    v, fr = doc["verdict"], (doc["attribution"].get("unprofiled") or doc["attribution"])["fractions"]
    print(f"\nRun 3 (truth-run3.json, scored on rules chosen on runs 1–2): the loader without the Python tracer, truth "
          f"input {truth3['regimes']['loader']['input_fraction']:.1%}: {v['bottleneck']} (kernel launch "
          f"{fr['kernel_launch']:.0%}), also " + ", ".join(f"{a['bottleneck']} {a['share']:.0%}" for a in v["also"])
          + f", advice: {_short(v['recommendations'])}; batch what-if "
          f"{truth3['batch_whatif']['throughput_ratio']}×, float32 ÷ bfloat16 step "
          f"{truth3['regimes']['retrace']['T_ms'] / truth3['regimes']['retrace']['T_c_ms']:.2f}×")
    b = truth["batch_whatif"]
    r = truth["regimes"]["retrace"]
    print(f"\nbatch what-if (compute regime): batch {b['batch']} {b['step_ms']} ms vs {b['base_step_ms']} ms → "
          f"{b['throughput_ratio']}× the sequences/s")
    print(f"precision what-if (retrace): float32 {r['T_ms']} ms vs bfloat16 {r['T_c_ms']} ms → "
          f"{r['T_ms'] / r['T_c_ms']:.2f}× the step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
