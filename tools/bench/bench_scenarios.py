"""The named comparisons end to end, as a user runs them: `tfbertperf compare --scenario NAME`.

    python tools/bench/bench_scenarios.py notebook-vs-cloud-vm [--repeat 3] [--set train.steps=30 ...]
    python tools/bench/bench_scenarios.py storage-backends     [--repeat 2] [--set ...]

notebook-vs-cloud-vm needs nothing but this machine.  storage-backends starts Azurite and fake-gcs-server on
127.0.0.1 (tfbertperf/testing/emulators.py), uploads the default data set to gs://tfbertperf-scenario/data and
az://tfbertperf-scenario/data, and points the scenario's cells at them through STORAGE_EMULATOR_HOST and
AZURE_STORAGE_CONNECTION_STRING.  The compare command prints the question, the tables with medians and spreads
(ratios measured side by side, round-robin), the explanation and the answer; its directory holds index.html.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario", choices=["notebook-vs-cloud-vm", "storage-backends"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--set", dest="sets", action="append", default=[])
    ap.add_argument("--out", default="runs")
    a = ap.parse_args()
    cmd = [sys.executable, "-m", "tfbertperf.compare", "--scenario", a.scenario, "--repeat", str(a.repeat),
           "--out", a.out] + [x for s in a.sets for x in ("--set", s)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if a.scenario != "storage-backends":
        return subprocess.run(cmd, env=env).returncode

    from tfbertperf.config import load_config
    from tfbertperf.job import Inputs
    from tfbertperf.storage.upload import upload_dir
    from tfbertperf.testing.emulators import Azurite, FakeGcs

    cfg = load_config(sets=a.sets)
    local = Inputs(cfg, progress=True).uri  # the default data set, prepared on first use
    with Azurite() as az, FakeGcs(tls=False) as gcs:
        os.environ.update(az.env())
        os.environ.update(gcs.env())
        env.update(az.env())
        env.update(gcs.env())
        gcs.create_bucket("tfbertperf-scenario")
        az.create_container("tfbertperf-scenario")
        for uri in ("gs://tfbertperf-scenario/data", "az://tfbertperf-scenario/data"):
            print(f"[bench] uploading {local} → {uri}", file=sys.stderr, flush=True)
            upload_dir(local, uri, progress=False)
        return subprocess.run(cmd, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
