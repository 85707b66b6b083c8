"""`tfbertperf analyze` at the size of real captures (issue 32), side by side with xprof's own two conversions
(overview_page + input_pipeline_analyzer, in one process, as TensorBoard's profile plugin runs them), on captures
made k times longer from the shared H100 stall capture (../shared/tools/scale_xspace.py: every line's events
repeated k times, step numbers kept unique; 10 MB unpacked → k = 32: 132 MB, k = 250: ~1 GB).

    python tools/bench/bench_analyze_scale.py [--k 1 8 32 250] [--reps 3] [--xprof-up-to-mb 200]

Each measurement is its own process, timed and sized by /usr/bin/time (wall seconds, CPU seconds, peak RSS of the
process — CPU seconds say more than wall time on a machine others load);
the two tools alternate which goes first, and the ratios are per pair (analyze ÷ xprof of the same round), with
their median and range.  analyze runs as users run it (`python -m tfbertperf analyze --json FILE`, default
--xprof auto).  Scaled captures are written under --dir (default /tmp/tfbertperf-scale) and reused; never commit
them.  The load average before and after each size is printed: the machine is shared.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"
STALL = SHARED / "fixtures" / "profiles" / "h100" / "h100-stall.xplane.pb.gz"
SCALER = SHARED / "tools" / "scale_xspace.py"

# xprof's two conversions on one file, in one process, the way xprof_tools runs them (a private folder of links:
# xprof writes its cached op_stats next to the inputs).
XPROF = """
import os, shutil, sys, tempfile
from xprof.convert.raw_to_tool_data import xspace_to_tool_data
tmp = tempfile.mkdtemp(); link = os.path.join(tmp, os.path.basename(sys.argv[1]))
os.symlink(os.path.abspath(sys.argv[1]), link)
for tool in ("overview_page", "input_pipeline_analyzer"):
    out = xspace_to_tool_data([link], tool, {"use_saved_result": False})
    assert out and (out[0] if isinstance(out, tuple) else out), tool
shutil.rmtree(tmp)
"""


def capture(k: int, folder: Path) -> Path:
    """The stall capture made k times longer (made once, then reused)."""
    folder.mkdir(parents=True, exist_ok=True)
    base = folder / "h100-stall-k1.xplane.pb"
    if not base.exists():
        base.write_bytes(gzip.decompress(STALL.read_bytes()))
    out = folder / f"h100-stall-k{k}.xplane.pb"
    if not out.exists():
        print(f"making {out} (k = {k}) …", file=sys.stderr, flush=True)
        tmp = out.with_suffix(".part")
        subprocess.run([sys.executable, str(SCALER), str(base), str(tmp), str(k)], check=True,
                       stdout=subprocess.DEVNULL)
        tmp.rename(out)
    return out


def measure(cmd: list[str]) -> tuple[float, float, float]:
    """(wall seconds, peak RSS in MB, CPU seconds — user + system) of one process."""
    with tempfile.NamedTemporaryFile("r") as stats:
        p = subprocess.run(["/usr/bin/time", "-o", stats.name, "-f", "%e %M %U %S", *cmd], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT),
                                                                   "TF_CPP_MIN_LOG_LEVEL": "2"})
        if p.returncode != 0:
            raise SystemExit(f"{' '.join(cmd[:4])} … failed ({p.returncode}): {p.stderr.strip()[-500:]}")
        wall, kb, user, system = stats.read().split()[-4:]
    return float(wall), int(kb) / 1024, float(user) + float(system)


def _spread(xs: list[float], fmt: str) -> str:
    return f"{format(statistics.median(xs), fmt)} ({format(min(xs), fmt)}–{format(max(xs), fmt)})" if len(xs) > 1 \
        else format(xs[0], fmt)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, nargs="+", default=[1, 8, 32, 250], help="capture lengths (× the original)")
    ap.add_argument("--reps", type=int, default=3, help="rounds per size (default 3)")
    ap.add_argument("--xprof-up-to-mb", type=float, default=200.0,
                    help="run xprof's conversions only on captures up to this size (default 200 MB: at 1 GB they "
                         "need ~13 GB of memory)")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/tfbertperf-scale"), help="where scaled captures live")
    a = ap.parse_args()
    if not shutil.which("/usr/bin/time"):
        raise SystemExit("/usr/bin/time is needed (GNU time: peak RSS of each process)")
    ours_cmd = [sys.executable, "-m", "tfbertperf", "analyze", "--json"]
    xprof_cmd = [sys.executable, "-c", XPROF]
    rows = []
    for k in a.k:
        path = capture(k, a.dir)
        mb = path.stat().st_size / 1e6
        load0 = os.getloadavg()
        ours, xprof = [], []
        for r in range(a.reps):
            with_xprof = mb <= a.xprof_up_to_mb
            order = ["ours", "xprof"] if r % 2 == 0 else ["xprof", "ours"]
            got = {}
            for who in order:
                if who == "xprof" and not with_xprof:
                    continue
                got[who] = measure((ours_cmd if who == "ours" else xprof_cmd) + [str(path)])
                print(f"k={k} {mb:.0f} MB round {r + 1} {who}: {got[who][0]:.2f} s, {got[who][1]:.0f} MB, "
                      f"{got[who][2]:.2f} s CPU",
                      file=sys.stderr, flush=True)
            ours.append(got["ours"])
            if "xprof" in got:
                xprof.append(got["xprof"])
        load1 = os.getloadavg()
        rows.append((k, mb, ours, xprof, load0, load1))
    print("| capture | analyze s | analyze CPU s | analyze peak RSS MB | analyze ms/MB | CPU ms/MB | RSS MB/MB "
          "| xprof overview+input pipeline s | xprof CPU s | xprof peak RSS MB | time ratio (per pair) "
          "| CPU ratio (per pair) | RSS ratio (per pair) | load avg (1 min) before → after |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for k, mb, ours, xprof, load0, load1 in rows:
        t = [x[0] for x in ours]
        m = [x[1] for x in ours]
        cells = [f"k={k}, {mb:.0f} MB", _spread(t, ".2f"), _spread([x[2] for x in ours], ".2f"), _spread(m, ".0f"),
                 _spread([1e3 * x / mb for x in t], ".0f"), _spread([1e3 * x[2] / mb for x in ours], ".0f"),
                 _spread([x / mb for x in m], ".2f")]
        if xprof:
            cells += [_spread([x[0] for x in xprof], ".2f"), _spread([x[2] for x in xprof], ".2f"),
                      _spread([x[1] for x in xprof], ".0f")]
            cells += [_spread([o[i] / x[i] for o, x in zip(ours, xprof)], ".2f") + "×" for i in (0, 2, 1)]
        else:
            cells += ["not run", "—", "—", "—", "—", "—"]
        cells.append(f"{load0[0]:.1f} → {load1[0]:.1f}")
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
