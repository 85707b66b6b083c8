"""The accelerator regime, measured (issue 16): emulated devices fed by the real pipeline on local disk and on the
storage emulators (fake-gcs-server for gs://, Azurite for az://, the fault proxy injecting per-request latency in
front of both; the local backend's own data.read_latency_ms for local disk).  Prints markdown tables.

1. Emulated A100-80GB AMP x1, BERT-large seq 128 (485.59 seq/s, batch 32 → 65.9 ms per step), local disk, tuned
   preset: AU (MLPerf Storage: emulated compute ÷ wall over the steps after the first).  Goal ≥ 0.97.
2. Max accelerators (the largest N with AU ≥ 0.90; doubling then bisection, short runs of --steps steps) for
   local / gs:// / az:// at 0 and 20 ms per request, tuned and naive presets, with each row's input ceiling
   (the pipeline alone at batch 32, --ceiling s).
3. Naive → tuned at 20 ms per request: input ceiling ratio and max-N ratio side by side (goal ≥ 5× each).
5. (not in the default --parts) Input ceilings of naive and tuned at 20 ms per request, presets taking turns,
   --reps rounds, at global batches --ratio-batches (32: one device; 256: 8 devices).
4. Headroom: runs at about half and twice the demand the measured ceiling feeds (N refined from the ceiling at
   its own global batch), --reps runs each — demand > ceiling: achieved examples/s within 10 % of the run's own
   ceiling; demand < ceiling: AU ≥ 0.95.  Local tuned, gs:// tuned and gs:// naive at 20 ms.

Remote reads: naive = one 256 KiB request at a time (data.concurrency=1; the stream reader still keeps a second
chunk of the shard requested; data.lookahead=0 matters to stage mode only), as a first attempt reads; tuned = 8
requests in flight (data.concurrency=8).  The fault proxy runs in a process of its own (--proxy-in-process: as
threads of the measured process, which costs the pipeline GIL and CPU time no real remote store does).

Data: synthetic pretraining shards (`prepare --synthetic`, exact feature spec, ~0.8 KB records) of --size, read
in 256 KiB requests (data.chunk_mb=0.25) so that per-request latency matters as it does for real objects.

    python tools/bench/bench_accelerators.py                      # ~15 min on a shared 2-core VM
    python tools/bench/bench_accelerators.py --quick              # parts 1 and 3 only (local + gs:// at 20 ms)
    python tools/bench/bench_accelerators.py --parts 4            # the headroom check only (N from the ceiling)
    python tools/bench/bench_accelerators.py --parts 3 --storages gs,az --latencies 20   # naive → tuned, 20 ms
    python tools/bench/bench_accelerators.py --parts 5 --storages gs,az --reps 3   # ceilings side by side, 20 ms
    python tools/bench/bench_accelerators.py --parts 3 --storages gs,az --latencies 20 --seq 512 --nmax 512
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

A100 = ["emulate.device=a100-80gb-amp", "model.size=large", "data.seq_len=128", "train.batch_size=32"]
SEQ_PER_S = {128: 485.59, 512: 96.52}  # the A100-80GB AMP BERT-large row of the device profiles, per --seq


def log(msg: str) -> None:
    print(f"bench_accelerators: {msg}", file=sys.stderr, flush=True)


def execute(sets: list[str], uri: str, tmp: str):
    from tfbertperf import job
    from tfbertperf.config import load_config

    cfg = load_config(data_uri=uri, sets=sets + [f"run.out={tmp}/runs"])
    d = tempfile.mkdtemp(dir=tmp)
    from pathlib import Path

    return job.execute(cfg, Path(d), Path(d) / "tb", progress=False)


def short(steps: int, warmup: int = 2) -> list[str]:
    return [f"train.steps={steps}", f"train.warmup_steps={warmup}", "profile.steps=none", "profile.probe_steps=0",
            "profile.utilization_hz=0", "train.log_every=1000"]


@contextlib.contextmanager
def storage(kind: str, latency: float, emus: dict, local: str):
    """(data URI, extra --set) with `latency` ms per request on `kind` (local | gs | az)."""
    from tfbertperf.testing.emulators import AZURITE_ACCOUNT, AZURITE_KEY
    from tfbertperf.testing.proxy import FaultProxy

    if kind == "local":
        yield local, [f"data.read_latency_ms={latency:g}"]
        return
    emu = emus[kind]
    old = dict(os.environ)
    upstream = emu.url if kind == "gs" else f"http://127.0.0.1:{emu.port}"
    with (proxy_process(upstream, latency) if PROXY_PROCESS else FaultProxy(upstream, latency_ms=latency)) as proxy:
        if kind == "gs":
            os.environ["STORAGE_EMULATOR_HOST"] = proxy.url
        else:
            os.environ["AZURE_STORAGE_CONNECTION_STRING"] = (
                f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
                f"BlobEndpoint={proxy.url}/{AZURITE_ACCOUNT};")
        try:
            yield f"{kind}://bench/syn", ["data.mode=stream"]
        finally:
            os.environ.clear()
            os.environ.update(old)


PROXY_PROCESS = True  # --proxy-in-process: the fault proxy's threads in the measured process (as before)


@contextlib.contextmanager
def proxy_process(upstream: str, latency: float):
    """The fault proxy in a process of its own (`python -m tfbertperf.testing.proxy`): in the benchmark's
    process its threads took the GIL and the CPU from the pipeline being measured (a real remote store costs the
    client nothing of the kind), which held tuned's ceiling down while naive's, bound by the latency, was not."""
    import subprocess
    from types import SimpleNamespace

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    p = subprocess.Popen([sys.executable, "-m", "tfbertperf.testing.proxy", "--upstream", upstream,
                          "--latency-ms", f"{latency:g}"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True, env=env)
    try:
        first = p.stdout.readline()  # "fault proxy on http://127.0.0.1:PORT -> …"
        if not first.startswith("fault proxy on "):
            raise RuntimeError(f"fault proxy did not start: {first!r}")
        yield SimpleNamespace(url=first.split()[3])
    finally:
        p.terminate()
        p.wait(timeout=10)


def ceiling(uri: str, sets: list[str], seconds: float) -> dict:
    from tfbertperf import job
    from tfbertperf.config import load_config
    from tfbertperf.data.ceiling import measure_ceiling
    from tfbertperf.data.pipeline import build_dataset
    from tfbertperf.storage import open_shards

    cfg = load_config(data_uri=uri, sets=sets)
    inputs = job.Inputs(cfg, progress=False)
    srcs = []

    def ds():
        srcs.append(open_shards(inputs.shard_uris, cfg.data, inputs.backend, inputs.record_bytes_hint))
        return build_dataset(cfg, inputs.manifest, srcs[-1])

    try:
        return measure_ceiling(ds, seconds, bytes_read=lambda: inputs.backend.metrics.bytes_read,
                               record_bytes=inputs.record_bytes_hint)
    finally:
        for s in srcs:
            s.close()


def max_n(uri: str, sets: list[str], steps: int, nmax: int, tmp: str) -> dict:
    from tfbertperf.train.maxaccel import search

    def measure(n):
        r = execute(A100 + short(steps) + sets + [f"emulate.accelerators={n}"], uri, tmp)
        return {"au": r["emulation"]["au"], "examples_per_sec": r["throughput"]["examples_per_sec"]}

    return search(measure, 0.90, n_max=nmax, progress=log)


def print_max_n(results: dict, nmax: int) -> None:
    seq = int(A100[2].split("=")[1])
    print(f"\n2. Max accelerators, emulated A100-80GB AMP BERT-large seq {seq} ({SEQ_PER_S[seq]:.0f} ex/s per device), "
          "AU ≥ 0.90\n")
    print("| storage | latency / request | preset | input ceiling ex/s (MB/s), batch 32 | N | AU at N | AU at N+1 | "
          "examples/s at N | input ceiling ex/s at N's batch | trials | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    fmt = lambda v: "—" if v is None else f"{v:.3f}"  # noqa: E731
    for (kind, lat, preset), (c, s) in results.items():
        n = f"≥ {s['n']}" if s["n"] >= nmax else str(s["n"])  # the search stops at --nmax
        print(f"| {kind} | {lat} ms | {preset} | {c['examples_per_sec']:.0f} ({c['mb_per_sec']:.1f}) | **{n}** | "
              f"{fmt(s['au_at_n'])} | {fmt(s['au_at_n_plus_1'])} | {s['examples_per_sec_at_n'] or 0:.0f} | "
              f"{c['at_n']['examples_per_sec']:.0f} | {len(s['trials'])} | {c['load']:.1f} |")


def print_ratios(results: dict, nmax: int) -> None:
    print("\n3. Naive → tuned at 20 ms per request (same data, one run each)\n")
    print("| storage | ceiling ex/s tuned / naive (batch 32) | ceiling tuned ÷ naive | ceiling ÷ at N's batch | "
          "max-N tuned / naive | max-N tuned ÷ naive |")
    print("|---|---|---|---|---|---|")
    for kind in ("local", "gs", "az"):
        if (kind, 20, "tuned") in results and (kind, 20, "naive") in results:
            (ct, st), (cn, sn) = results[(kind, 20, "tuned")], results[(kind, 20, "naive")]
            ge = "≥ " if st["n"] >= nmax else ""
            nr = f"{ge}{st['n'] / sn['n']:.1f}×" if sn["n"] else f"{st['n']} vs 0"
            print(f"| {kind} | {ct['examples_per_sec']:.0f} / {cn['examples_per_sec']:.0f} | "
                  f"{ct['examples_per_sec'] / cn['examples_per_sec']:.1f}× | "
                  f"{ct['at_n']['examples_per_sec'] / cn['at_n']['examples_per_sec']:.1f}× | "
                  f"{ge}{st['n']} / {sn['n']} | {nr} |")


def ceiling_ratios(a, emus: dict, local: str, remote: dict) -> None:
    """Part 5: the input ceilings of tuned and naive at 20 ms per request side by side — each storage, each of
    --ratio-batches global batches, --reps rounds with the presets taking turns — and the median ratio."""
    import statistics

    batches = [int(b) for b in a.ratio_batches.split(",")]
    print("\n5. Input ceiling, naive → tuned at 20 ms per request (side by side, presets taking turns)\n")
    print("| storage | global batch | naive ex/s (each round) | tuned ex/s (each round) | tuned ÷ naive (each round) | "
          "median ratio | load |")
    print("|---|---|---|---|---|---|---|")
    for kind in a.storages.split(","):
        for gb in batches:
            got = {"naive": [], "tuned": []}
            for _ in range(a.reps):
                for preset in ("naive", "tuned"):
                    with storage(kind, 20, emus, local) as (uri, extra):
                        sets = A100 + extra + ([] if kind == "local" else remote[preset])
                        got[preset].append(ceiling(uri, sets + [f"pipeline.preset={preset}", f"train.batch_size={gb}"],
                                                   a.ceiling)["examples_per_sec"])
            ratios = [t / n for t, n in zip(got["tuned"], got["naive"])]
            fmt = lambda xs, f: ", ".join(format(x, f) for x in xs)  # noqa: E731
            print(f"| {kind} | {gb} | {fmt(got['naive'], '.0f')} | {fmt(got['tuned'], '.0f')} | {fmt(ratios, '.1f')} | "
                  f"**{statistics.median(ratios):.1f}×** | {os.getloadavg()[0]:.1f} |", flush=True)


def headroom_ns(kind, lat, preset, results, emus, local, remote, seconds) -> tuple[int, int]:
    """N with the demand about half the input ceiling and about twice it, in 486 ex/s devices.  The ceiling
    depends on the global batch (per-batch costs; naive's lack of overlap), so each N is refined from the ceiling
    measured at its own batch (start: the max-N search's N when part 2 ran, else 1), at most 3 times."""
    per_device = SEQ_PER_S[int(A100[2].split("=")[1])]
    with storage(kind, lat, emus, local) as (uri, extra):
        sets = A100 + extra + ([] if kind == "local" else remote[preset]) + [f"pipeline.preset={preset}"]

        def at(n: int) -> float:
            c = ceiling(uri, sets + [f"train.batch_size={32 * n}"], seconds)["examples_per_sec"]
            log(f"{kind} {lat} ms {preset}: ceiling {c:.0f} ex/s at N={n} (batch {32 * n}): "
                f"{c / per_device:.1f} devices' demand")
            return c

        n0 = max(1, results[(kind, lat, preset)][1]["n"]) if (kind, lat, preset) in results else 1
        c0 = at(n0)
        out = []
        for factor in (0.5, 2.0):
            n = max(1, int(round(factor * c0 / per_device)))
            for _ in range(3):
                target = max(1, int(round(factor * at(n) / per_device)))
                if abs(target - n) <= 0.15 * n:
                    break
                n = target
            out.append(n)
    return out[0], max(out[1], out[0] + 1)


def headroom_row(kind, lat, preset, n, r) -> str:
    """One row of part 4: demand < ceiling → AU ≥ 0.95; demand > ceiling → achieved within 10 % of the ceiling.
    The no-overlap bound 1 / (1/ceiling + 1/demand) is what a pipeline that works only inside next() (naive:
    no prefetch; only the stream reader's 2 chunks read ahead) achieves once a batch outgrows its read-ahead.
    The runs take 80 steps and count examples/s after 20 (tf.data's autotuning ramps up over the first seconds
    of a fresh pipeline; the ceiling excludes its own warm-up too); AU is over the steps after the first."""
    ce, ach, au = r["input_ceiling"]["examples_per_sec"], r["throughput"]["examples_per_sec"], r["emulation"]["au"]
    over = r["demand_examples_per_sec"] > ce
    goal, met = ("achieved ÷ ceiling 0.9–1.1", 0.9 <= ach / ce <= 1.1) if over else ("AU ≥ 0.95", au >= 0.95)
    return (f"| {kind} {lat} ms | {preset} | {n} | {r['demand_examples_per_sec']:.0f} | {ce:.0f} | {r['headroom']:.2f} | "
            f"{ach:.0f} | {ach / ce:.2f} | {au:.3f} | {goal} | {'yes' if met else '**no**'} | "
            f"{1 / (1 / ce + 1 / r['demand_examples_per_sec']):.0f} | {os.getloadavg()[0]:.1f} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="48MB", help="synthetic data size (prepare --synthetic --size)")
    ap.add_argument("--steps", type=int, default=48,
                    help="steps of each max-N trial (16 were too few: AU then counts tf.data's autotuning ramp-up of "
                         "each fresh pipeline, which costs tuned and not naive)")
    ap.add_argument("--au-steps", type=int, default=80, help="steps of the A100 x1 AU run")
    ap.add_argument("--seq", type=int, default=128, choices=sorted(SEQ_PER_S),
                    help="sequence length of the data and the emulated device (512: ~2.5 KB records, MLPerf's BERT)")
    ap.add_argument("--nmax", type=int, default=256)
    ap.add_argument("--ceiling", type=float, default=3.0, help="seconds of each input ceiling")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--parts", default="1,2,3,4", help="which parts to run, e.g. 4 (headroom only) or 2,3")
    ap.add_argument("--proxy-in-process", action="store_true",
                    help="run the fault proxy as threads of this process (the measured one), as before")
    ap.add_argument("--reps", type=int, default=2, help="part 4: runs per N")
    ap.add_argument("--storages", default="local,gs,az", help="part 2/3: storages (local,gs,az)")
    ap.add_argument("--ratio-batches", default="32,256", help="part 5: global batches of the ceiling ratios")
    ap.add_argument("--latencies", default="0,20", help="part 2/3: ms per request")
    a = ap.parse_args(argv)
    parts = {int(x) for x in a.parts.split(",")}
    global PROXY_PROCESS
    PROXY_PROCESS = not a.proxy_in_process

    from tfbertperf.data.prep.synthetic_shards import parse_size, write_synthetic
    from tfbertperf.storage.upload import upload_dir
    from tfbertperf.config import load_config
    from tfbertperf.testing.emulators import Azurite, FakeGcs

    tmp = tempfile.mkdtemp(prefix="bench-acc-")
    local = os.path.join(tmp, "syn")
    A100[2] = f"data.seq_len={a.seq}"
    m = write_synthetic(local, size_bytes=parse_size(a.size), seq_len=a.seq, shards=16)
    A100.append(f"data.max_predictions={m['max_predictions']}")  # 20 at seq 128, 76 at 512
    log(f"synthetic data: {m['num_examples']} examples, {a.size} in 16 shards at {local}")
    # naive reads as a first attempt does: one request at a time, nothing ahead; tuned: 8 requests in flight
    remote = {"tuned": ["data.chunk_mb=0.25", "data.concurrency=8"],
              "naive": ["data.chunk_mb=0.25", "data.concurrency=1", "data.lookahead=0"]}
    with FakeGcs(tls=False) as gcs, Azurite() as az:
        os.environ.update(gcs.env())
        os.environ.update(az.env())
        az.create_container("bench")
        gcs.create_bucket("bench")
        for kind in ("gs", "az"):
            upload_dir(local, f"{kind}://bench/syn", load_config().data, progress=False)
        emus = {"gs": gcs, "az": az}

        # 1. A100 x1 on local disk, tuned
        if 1 in parts:
            r = execute(A100 + short(a.au_steps) + ["profile.ceiling_seconds=2"], local, tmp)
            e = r["emulation"]
            print(f"\n1. Emulated A100-80GB AMP x1, BERT-large seq {a.seq}, batch 32, local disk, tuned\n")
            print("| steps | step ms (emulated) | AU | examples/s | demand | input ceiling ex/s | headroom | load |")
            print("|---|---|---|---|---|---|---|---|")
            print(f"| {a.au_steps} | {e['step_ms']:.1f} | **{e['au']:.4f}** | {r['throughput']['examples_per_sec']:.1f} | "
                  f"{e['demand_examples_per_sec']:.1f} | {r['input_ceiling']['examples_per_sec']:.0f} | "
                  f"{r['headroom']:.1f} | {os.getloadavg()[0]:.1f} |", flush=True)

        # 2. max-N table (3: its 20 ms rows side by side)
        rows = [(k, int(lat), p) for k in a.storages.split(",") for lat in a.latencies.split(",")
                for p in ("tuned", "naive")]
        if a.quick:
            rows = [("local", 0, "tuned"), ("gs", 20, "tuned"), ("gs", 20, "naive")]
        results = {}
        for kind, lat, preset in rows if parts & {2, 3} else []:
            with storage(kind, lat, emus, local) as (uri, extra):
                sets = extra + ([] if kind == "local" else remote[preset]) + [f"pipeline.preset={preset}"]
                c = ceiling(uri, A100 + sets, a.ceiling)
                c["load"] = os.getloadavg()[0]
                s = max_n(uri, sets, a.steps, a.nmax, tmp)
                c["at_n"] = ceiling(uri, A100 + sets + [f"train.batch_size={32 * max(1, s['n'])}"], a.ceiling)
            results[(kind, lat, preset)] = (c, s)
            log(f"{kind} {lat} ms {preset}: ceiling {c['examples_per_sec']:.0f} ex/s, N={s['n']}")
        if results:
            print_max_n(results, a.nmax)
            print_ratios(results, a.nmax)
        if 5 in parts:
            ceiling_ratios(a, emus, local, remote)

        # 4. headroom check: demand below and above the run's own ceiling (local tuned; gs naive 20 ms)
        if 4 in parts:
            print("\n4. Headroom: demand below / above the run's own input ceiling "
                  f"(ceiling: at the run's global batch, >= {a.ceiling:g} s and >= 30 batches, steady state)\n")
            print("| storage | preset | N | demand ex/s | ceiling ex/s | headroom | achieved ex/s | achieved ÷ ceiling | "
                  "AU | goal | met | no-overlap bound ex/s | load |")
            print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
            for kind, lat, preset in (("local", 0, "tuned"), ("gs", 20, "tuned"), ("gs", 20, "naive")):
                for n in headroom_ns(kind, lat, preset, results, emus, local, remote, a.ceiling):
                    for _ in range(a.reps):
                        with storage(kind, lat, emus, local) as (uri, extra):
                            sets = extra + ([] if kind == "local" else remote[preset]) + [f"pipeline.preset={preset}"]
                            r = execute(A100 + short(80, 20) + sets + [f"emulate.accelerators={n}",
                                                                       f"profile.ceiling_seconds={a.ceiling:g}"],
                                        uri, tmp)
                        print(headroom_row(kind, lat, preset, n, r), flush=True)
    print(f"\nload average at the end: {os.getloadavg()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
