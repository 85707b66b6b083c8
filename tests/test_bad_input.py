"""Bad input everywhere (issue 15 item 6): every subcommand, given a bad flag, value, URI, path or config, exits
with status 2 and exactly one line on stderr that names the culprit — never a traceback, never a run directory.

Each case runs the command's `main` in this process (the same code `tfbertperf <cmd>` runs; cli_entry turns a
UsageError into the line and the exit status); one case per command also runs as a real subprocess."""

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    (d / "not.json").write_text("{ this is not json")
    (d / "list.json").write_text("[1, 2]")
    (d / "typo.yaml").write_text("train:\n  batchsize: 8\n")
    (d / "broken.yaml").write_text("train: [unclosed\n")
    (d / "listdoc.yaml").write_text("- a\n- b\n")
    (d / "badvalue.yaml").write_text("model:\n  size: gigantic\n")
    (d / "bad.xplane.pb").write_bytes(b"\x00\x01 definitely not a protobuf xplane \xff" * 10)
    (d / "empty_logdir").mkdir()
    runs = d / "runs"
    for name in ("20260101T000000Z-default", "20260102T000000Z-default"):
        (runs / name).mkdir(parents=True)
        (runs / name / "report.json").write_text('{"schema": "tfbertperf.report/1"}')
    (d / "file").write_text("a file where a directory should be")
    return d


# (command, argv with {d} for the fixture directory, text the one line must contain)
CASES = [
    ("run", ["--bogus-flag"], "--bogus-flag"),
    ("run", ["--set", "pipeline.bogus=1"], "pipeline.bogus"),
    ("run", ["--set", "train.batch_size=lots"], "train.batch_size"),
    ("run", ["--set", "model.size=gigantic"], "model.size"),
    ("run", ["--set", "nodot"], "nodot"),
    ("run", ["--set", "train.steps=30", "--set", "profile.steps=20:40"], "profile.steps=10:20"),
    ("run", ["--set", "train.checkpoint_every=-1"], "train.checkpoint_every"),
    ("run", ["--set", "data.verify=md5"], "data.verify"),
    ("run", ["--data", "s3://bucket/shards"], "s3"),
    ("run", ["--data", "{d}/no/such/dir"], "{d}/no/such/dir"),
    ("run", ["--data", "az://c/p", "--set", "data.mode=native"], "data.mode=native"),
    ("run", ["--workload", "no_such_workload"], "no_such_workload"),
    ("run", ["--workload", "{d}/typo.yaml"], "{d}/typo.yaml: train.batchsize"),
    ("run", ["--workload", "{d}/broken.yaml"], "{d}/broken.yaml"),
    ("run", ["--workload", "{d}/listdoc.yaml"], "{d}/listdoc.yaml"),
    ("run", ["--workload", "{d}/badvalue.yaml"], "model.size"),
    ("run", ["--workers", "-1"], "--workers"),
    ("run", ["--workers", "two"], "--workers"),
    ("run", ["--resume", "{d}/nope"], "{d}/nope"),
    ("run", ["--set", "run.out={d}/file/runs"], "run.out"),
    ("prepare", ["--bogus"], "--bogus"),
    ("prepare", ["--set", "data.bogus=1"], "data.bogus"),
    ("prepare", ["--set", "data.corpus={d}/no_corpus.txt"], "{d}/no_corpus.txt"),
    ("prepare", ["--out", "s3://bucket/x"], "s3"),
    ("prepare", ["--synthetic"], "--examples"),
    ("prepare", ["--synthetic", "--examples", "0"], "--examples"),
    ("prepare", ["--synthetic", "--size", "12 parsecs"], "12 parsecs"),
    ("prepare", ["--examples", "5"], "--synthetic"),
    ("prepare", ["--workload", "{d}/typo.yaml"], "{d}/typo.yaml"),
    ("compare", [], "--matrix"),
    ("compare", ["--bogus"], "--bogus"),
    ("compare", ["--matrix", "pipeline.preset=naive,turbo", "--out", "{d}/cmp"], "turbo"),
    ("compare", ["--matrix", "nonsense", "--out", "{d}/cmp"], "nonsense"),
    ("compare", ["--reports", "{d}/no_report.json", "{d}/not.json"], "{d}/no_report.json"),
    ("compare", ["--reports", "{d}/not.json", "{d}/not.json"], "{d}/not.json"),
    ("compare", ["--reports", "{d}/list.json", "{d}/list.json"], "{d}/list.json"),
    ("compare", ["--reports", "{d}/runs"], "runs root"),
    ("analyze", [], "path"),
    ("analyze", ["--bogus", "x"], "--bogus"),
    ("analyze", ["{d}/no/such/logdir"], "{d}/no/such/logdir"),
    ("analyze", ["{d}/empty_logdir"], "{d}/empty_logdir"),
    ("analyze", ["{d}/bad.xplane.pb"], "{d}/bad.xplane.pb"),
    ("analyze", ["--xprof", "sometimes", "{d}/bad.xplane.pb"], "--xprof"),
    ("analyze", ["{d}/empty_logdir", "{d}/not.json"], "{d}/empty_logdir"),
    ("env", ["--bogus"], "--bogus"),
    ("env", ["--diff", "{d}/not.json"], "--diff"),
    ("env", ["--diff", "{d}/nope.json", "{d}/not.json"], "{d}/nope.json"),
    ("env", ["--diff", "{d}/not.json", "{d}/not.json"], "{d}/not.json"),
    ("env", ["--diff", "{d}/list.json", "{d}/list.json"], "{d}/list.json"),
    ("env", ["--rtol", "tight"], "--rtol"),
    ("env", ["--out", "{d}/no/such/dir/env.json", "--no-probe"], "{d}/no/such/dir"),
    ("env", ["--data", "s3://bucket/x", "--no-probe"], "s3"),
    ("tokenize", [], "--check"),
    ("tokenize", ["--check", "--limit", "0"], "--limit"),
    ("tokenize", ["--check", "--corpus", "{d}/no_corpus.txt"], "{d}/no_corpus.txt"),
    ("tokenize", ["--check", "--data", "s3://bucket/x"], "s3"),
]


@pytest.mark.parametrize("cmd, argv, culprit", CASES, ids=[f"{c}:{' '.join(a)}" for c, a, _ in CASES])
def test_bad_input_is_one_line_and_exit_2(cmd, argv, culprit, files, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # a run directory made by mistake would land here
    main = importlib.import_module(f"tfbertperf.{cmd}").main
    argv = [a.format(d=files) for a in argv]
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert e.value.code == 2, err
    assert len(lines) == 1 and lines[0].startswith("tfbertperf: error:"), err
    assert culprit.format(d=files) in lines[0], lines[0]
    assert "Traceback" not in err
    assert not (tmp_path / "runs").exists() and not list(Path(files).glob("cmp/*")), "a bad input left a directory"


def _console(cmd, argv, cwd, **env):
    """`python -m tfbertperf CMD ARGV` as a user runs it: TF_CPP_MIN_LOG_LEVEL as the user left it (unset here)."""
    e = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return subprocess.run([sys.executable, "-m", "tfbertperf", cmd, *argv], capture_output=True, text=True,
                          cwd=cwd, timeout=180, env={**e, "PYTHONPATH": str(ROOT), **env})


# Cases refused once TensorFlow is loaded and its runtime started (the table's cases are all refused before TF is
# imported): without the commands' quiet default their stderr had 7 more lines (absl's pre-init notice, the oneDNN
# and CUDA-stub INFO lines, twice, and "E… failed call to cuInit").
TF_CASES = [
    ("run", ["--set", "train.strategy=one_device", "--set", "train.device=/gpu:7"], "train.device=/gpu:7"),
    ("run", ["--set", "train.strategy=tpu"], "train.strategy=tpu"),
]


@pytest.mark.parametrize("cmd, argv, culprit", CASES + TF_CASES,
                         ids=[f"{c}:{' '.join(a)}" for c, a, _ in CASES + TF_CASES])
def test_bad_input_through_the_console_script(cmd, argv, culprit, files, tmp_path):
    """The whole process's stderr — TF's C++ logging included (oneDNN notice, cuInit, absl's "All log messages
    before absl::InitializeLog()") — is exactly our one line: the commands default TF_CPP_MIN_LOG_LEVEL before
    TensorFlow is imported (tfbertperf/errors.py quiet_tf_logs)."""
    r = _console(cmd, [a.format(d=files) for a in argv], tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("tfbertperf: error:"), r.stderr
    assert culprit.format(d=files) in r.stderr, r.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("cmd, needles", [
    ("run", ["bert_base, default, naive", "SECTION.KEY=VALUE", "--resume RUN_DIR", "--workers"]),
    ("compare", ["--workload NAME|FILE", "workload name (bert_base, default, naive)", "--data URI",
                 "SECTION.KEY=VALUE", "override any RunConfig field", "not a runs root"]),
    ("prepare", ["SECTION.KEY=VALUE", "--synthetic"]),
    ("env", ["--diff A B", "--out FILE"]),
    ("analyze", ["--validate", "--json"]),
    ("tokenize", ["--check", "--corpus FILE"]),
])
def test_help_documents_every_option(cmd, needles, capsys):
    """issue 17 finding 7: --help says what each option takes (run lists the workloads; compare documents the
    options every cell shares; prepare says SECTION.KEY=VALUE like the others)."""
    main = importlib.import_module(f"tfbertperf.{cmd}").main
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert e.value.code == 0
    for n in needles:
        assert n in out, (n, out)


def test_tf_log_level_of_the_user_is_kept(tmp_path):
    """TF_CPP_MIN_LOG_LEVEL=0 set by the user brings TF's lines back (the quiet default is only a default)."""
    cmd, argv, culprit = TF_CASES[0]
    r = _console(cmd, argv, tmp_path, TF_CPP_MIN_LOG_LEVEL="0")
    lines = r.stderr.splitlines()
    assert r.returncode == 2 and culprit in lines[-1], r.stderr
    # TF's C++ start-up lines (glog format "I0000 00:00:… file.cc:N] …"); which ones depends on the machine
    # (oneDNN / cuInit on some, cudart_stub / cpu_feature_guard on others)
    assert any(re.match(r"[IWE]\d{4} [\d:.]+ +\d+ \w+\.cc:\d+\] ", x) for x in lines), r.stderr


def test_filter_tf_import_lines_follows_the_level():
    from tfbertperf.errors import filter_tf_import_lines

    text = ("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
            "I0000 00:00:1795406729.877479   32383 port.cc:153] oneDNN custom operations are on.\n"
            "I0000 00:00:1795406729.936538   32383 cpu_feature_guard.cc:227] This TensorFlow binary is optimized\n"
            "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow\n"
            "W0000 00:00:1795406729.9   32383 x.cc:1] a warning\n"
            "E0000 00:00:1795406733.445284   32383 cuda_platform.cc:52] failed call to cuInit\n"
            "a line of Python's own\n")
    assert filter_tf_import_lines(text, 0) == text
    assert filter_tf_import_lines(text, 1).splitlines() == [
        "W0000 00:00:1795406729.9   32383 x.cc:1] a warning",
        "E0000 00:00:1795406733.445284   32383 cuda_platform.cc:52] failed call to cuInit", "a line of Python's own"]
    assert filter_tf_import_lines(text, 3) == "a line of Python's own\n"


def test_the_keras_jax_bench_refuses_a_folder_without_results_in_one_line(tmp_path):
    # `--from DIR` reads the fits tools/bench/keras_jax_gpu.sh left on the device machine
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bench" / "bench_keras_jax_probe.py"), "--from",
                           str(tmp_path)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [f"bench_keras_jax_probe: --from {tmp_path}: no results.jsonl there"]


@pytest.mark.parametrize("case", ["missing", "no pairs", "baseline"])
def test_the_kept_captures_verdict_bench_refuses_bad_input_in_one_line(tmp_path, case):
    bench = ROOT / "tools" / "bench" / "bench_verdicts_kept.py"
    pairs = tmp_path / "pairs.err"
    pairs.write_text('[bench] fit map: repetition 1/1 …\n{"shape": "map", "truth": 0.1, "fit_truth": 0.1, '
                     f'"logdir": "{tmp_path}"}}\n' if case == "baseline" else "[bench] nothing kept\n")
    args = {"missing": [str(tmp_path / "gone.err")], "no pairs": [str(pairs)],
            "baseline": [str(pairs), "--baseline", str(tmp_path)]}[case]
    proc = subprocess.run([sys.executable, str(bench), *args], capture_output=True, text=True)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("bench_verdicts_kept: ") and {
        "missing": "gone.err: No such file", "no pairs": "no fit pairs",
        "baseline": f"--baseline {tmp_path}: no tfbertperf package there"}[case] in proc.stderr, proc.stderr


def test_the_keras_jax_bench_refuses_a_broken_archive_in_one_line(tmp_path):
    # keras_jax_gpu.sh packs everything in all.tgz (a device call returns at most 8 files); a cut-off transfer
    (tmp_path / "all.tgz").write_bytes(b"\x1f\x8b\x08\x00 not the rest of a gzip stream")
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bench" / "bench_keras_jax_probe.py"), "--from",
                           str(tmp_path)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and proc.stdout == ""
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"bench_keras_jax_probe: --from {tmp_path}: all.tgz is not a readable archive (")


@pytest.mark.parametrize("truth", [None, "{not json", '{"device": "H200"}'], ids=["missing", "broken", "no regimes"])
def test_the_jax_loop_bench_refuses_a_folder_without_a_readable_truth_in_one_line(tmp_path, truth):
    # bench_jax_loop_runs.py reads the folders tests/programs/jax_gpu_user.py wrote on the device machine
    if truth is not None:
        (tmp_path / "truth.json").write_text(truth)
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bench" / "bench_jax_loop_runs.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and proc.stdout == ""
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"bench_jax_loop_runs: {tmp_path}") and ("no truth.json there" if truth is None else
                                                                     "not a jax_gpu_user.py truth file") in line


@pytest.mark.parametrize("args, said", [
    (["--cases", "numpy"], "--cases 'numpy': expected LOADER:MS,"),
    (["--cases", "grain:5"], "--cases 'grain:5': expected LOADER:MS,"),
    (["--cases", "numpy:-1"], "--cases 'numpy:-1': expected LOADER:MS,"),
    (["--thread", "--process"], "--thread and --process: the loader runs in one of them"),
    (["--bare", "--probe"], "--bare and --probe: the probe is StepTimer's"),
], ids=["no ms", "unknown loader", "negative", "thread and process", "bare and probe"])
def test_the_jax_cpu_loader_bench_refuses_bad_cases_in_one_line(args, said):
    # refused before any program runs (each would take ~10 s)
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bench" / "bench_jax_cpu_loader.py"), *args],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and proc.stdout == ""
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"bench_jax_cpu_loader: {said}"), line


@pytest.mark.parametrize("flag", ["--busy", "--epoch-steps"])
def test_the_foreign_attribution_bench_refuses_a_negative_count_in_one_line(flag):
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bench" / "bench_attribution_foreign.py"), flag,
                           "-2"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and proc.stdout == ""
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"bench_attribution_foreign: {flag} -2: expected a count"), line


def test_a_neighbours_burst_refuses_a_bad_value_in_one_line():
    # the bench refuses it before any fit runs; the fit program itself after TensorFlow's own import lines
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bench" / "bench_attribution_foreign.py"), "--burst",
                           "52"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and proc.stdout == ""
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("bench_attribution_foreign: --burst 52: expected STEP:MS"), line
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "programs" / "keras_fit_shapes.py"), "--shape", "map",
                           "--out", "unused", "--burst", "52:-1"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"})
    ours = [x for x in proc.stderr.strip().splitlines() if not x.startswith(("I0000", "WARNING: All log messages"))]
    assert proc.returncode == 2 and proc.stdout == "" and ours == [
        "keras_fit_shapes: --burst 52:-1: expected STEP:MS, a step ≥ 0 and milliseconds > 0"], proc.stderr


@pytest.mark.parametrize("case", ["no files", "missing", "no pairs", "ran", "recovery", "baseline"])
def test_the_kept_what_if_bench_refuses_bad_input_in_one_line(tmp_path, case):
    pairs = tmp_path / "pairs.err"
    pairs.write_text("[bench] nothing kept\n")
    args, said = {"no files": ([], "no files of fit pairs given"),
                  "missing": ([str(tmp_path / "gone.err")], "gone.err: No such file"),
                  "no pairs": ([str(pairs)], "no kept fit pairs"),
                  "ran": (["--ran", "now"], "--ran now: expected CODE:FILE"),
                  "recovery": ([str(pairs), "--recovery"], "--recovery compares two codes: give --baseline"),
                  "baseline": ([str(pairs), "--baseline", str(tmp_path)], "no tfbertperf package there")}[case]
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bench" / "bench_whatif_kept.py"), *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("bench_whatif_kept: ") and said in proc.stderr, proc.stderr


@pytest.mark.parametrize("bench, args, said", [
    ("bench_python_loader", ["--cases", "mixed,nope"],
     "bench_python_loader: --cases 'mixed,nope': expected a comma-separated list of"),
    ("bench_tf_custom_loop", ["--inputs", "wait,nope"],
     "bench_tf_custom_loop: --inputs nope: unknown (choose from wait, parse, memory)"),
])
def test_a_bench_refuses_an_unknown_case_in_one_line(bench, args, said):
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bench" / f"{bench}.py"), *args],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and proc.stdout == ""
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(said), line


@pytest.mark.parametrize("args, said", [
    (["--reps", "0"], "--reps 0 / --steps 160: need at least 1 and 40"),
    (["--steps", "10"], "--reps 3 / --steps 10: need at least 1 and 40"),
    (["--baseline", "/nonexistent-checkout"], "--baseline /nonexistent-checkout: no tfbertperf package there"),
], ids=["reps", "steps", "baseline"])
def test_the_tfdata_maps_bench_refuses_bad_flags_in_one_line(args, said):
    # refused before any fit runs (five fits a repetition)
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bench" / "bench_tfdata_maps.py"), *args],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and proc.stdout == ""
    [line] = proc.stderr.strip().splitlines()
    assert line == f"bench_tfdata_maps: {said}", line


def test_a_damaged_thread_record_beside_a_gzipped_capture_is_one_line_naming_it(tmp_path):
    """A shared `.xplane.pb.gz` is read as it is, and the thread-CPU record beside it with it (0642c2d: it was looked
    for beside the temporary copy, so a damaged one went unread and the capture was read with estimated CPU)."""
    import shutil

    src = ROOT / "tests" / "fixtures" / "cpu-keras-generator"
    shutil.copy(src / "vm.xplane.pb.gz", tmp_path / "vm.xplane.pb.gz")
    (tmp_path / "threadcpu.json").write_text("{not json")
    proc = _console("analyze", [str(tmp_path / "vm.xplane.pb.gz")], tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"tfbertperf: error: {tmp_path / 'threadcpu.json'}: damaged thread-CPU record"), lines
