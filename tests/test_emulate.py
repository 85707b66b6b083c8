"""Emulated accelerators: device profiles (every row sourced, derived rows recomputable), step-time and demand
arithmetic, scaling, one-line UsageErrors naming the bad value, and the precision and CPU cost of the wait."""

import math
import time

import pytest

from tfbertperf.errors import UsageError
from tfbertperf.train.emulated_devices import au, au_from_steps, bert_parameters, emulated_step, load_profiles, resolve

REQUIRED_PROFILES = ("a100-80gb-amp", "a100-80gb-tf32", "v100-32gb-amp", "v100-32gb-fp32", "dlio-bert-v100")


def test_profiles_load_and_every_row_names_its_source():
    data = load_profiles()
    profiles = data["profiles"]
    for name in REQUIRED_PROFILES:
        assert name in profiles
    assert any(n.startswith("h100-") for n in profiles) and any(n.startswith("t4-") for n in profiles)
    assert any(n.startswith("tpu-v3-") for n in profiles)
    for name, prof in profiles.items():
        assert prof["rows"], name
        for r in prof["rows"]:
            assert r["source"] in data["sources"] and data["sources"][r["source"]].strip(), (name, r)
            assert r["model"] in data["model_sizes"] and r["seq_len"] > 0 and r["seq_per_s"] > 0, (name, r)
            if "derived_from" in r or "derivation" in r:
                assert data["derivations"][r["derivation"]].strip(), (name, r)


def test_gpu_and_tpu_profiles_cover_base_and_large_at_128_and_512():
    profiles = load_profiles()["profiles"]
    for name, prof in profiles.items():
        if name.startswith("dlio-"):
            continue
        have = {(r["model"], r["seq_len"]) for r in prof["rows"]}
        assert have >= {(m, s) for m in ("base", "large") for s in (128, 512)}, name


def test_derived_rows_recompute_from_their_stated_row_and_factor():
    profiles = load_profiles()["profiles"]
    table = {(p, r["model"], r["seq_len"]): r["seq_per_s"] for p, prof in profiles.items() for r in prof["rows"]}
    n = 0
    for p, prof in profiles.items():
        for r in prof["rows"]:
            if "derived_from" in r:
                src_p, model, seq = r["derived_from"].split("/")
                expected = round(table[(src_p, model, int(seq))] * r["factor"], 2)
                assert r["seq_per_s"] == pytest.approx(expected, abs=0.011), (p, r)
                n += 1
    assert n >= 20


def test_published_anchors_are_the_published_figures():
    profiles = load_profiles()["profiles"]

    def get(p, m, s):
        return next(r["seq_per_s"] for r in profiles[p]["rows"] if r["model"] == m and r["seq_len"] == s)

    assert (get("a100-80gb-amp", "large", 128), get("a100-80gb-amp", "large", 512)) == (485.59, 96.52)
    assert (get("a100-80gb-tf32", "large", 128), get("a100-80gb-tf32", "large", 512)) == (282.98, 54.92)
    assert (get("v100-32gb-amp", "large", 128), get("v100-32gb-amp", "large", 512)) == (206.5, 40.95)
    assert (get("v100-32gb-fp32", "large", 128), get("v100-32gb-fp32", "large", 512)) == (49.97, 11.06)
    assert resolve("dlio-bert-v100", "large", 512, 48).step_ms == pytest.approx(968.0)


def test_model_sizes_match_the_model_and_parameter_counts():
    data = load_profiles()
    assert bert_parameters(12, 768) == 109_482_240 and bert_parameters(24, 1024) == 335_141_888
    from tfbertperf.model.bert import SIZES

    assert {k: (v["layers"], v["hidden"]) for k, v in data["model_sizes"].items()} == {
        k: (L, H) for k, (L, H, _) in SIZES.items()}


@pytest.mark.parametrize("n", [1, 2, 8])
def test_a100_large_seq128_demand_is_n_times_485_59(n):
    e = resolve("a100-80gb-amp", "large", 128, batch_size=64, accelerators=n)
    assert e.demand_examples_per_sec == pytest.approx(485.59 * n)
    assert e.step_ms == pytest.approx(64 / 485.59 * 1000)  # per global step, independent of N
    assert e.global_batch_size == 64 * n and e.accelerators == n
    assert "485.59" in e.source and "DeepLearningExamples" in e.source
    assert e.to_report()["device"] == "a100-80gb-amp"


def test_explicit_step_ms_overrides_the_profile():
    e = resolve("v100-32gb-amp", "base", 128, batch_size=32, accelerators=4, step_ms=50.0)
    assert e.step_ms == 50.0 and e.demand_examples_per_sec == pytest.approx(4 * 32 / 0.05)
    assert "emulate.step_ms=50" in e.source and "v100-32gb-amp" in e.source
    c = resolve("custom", "tiny", 128, batch_size=8, step_ms=10)
    assert c.demand_examples_per_sec == pytest.approx(800.0)


def test_untabled_size_and_seq_len_are_scaled_and_say_so():
    base = resolve("a100-80gb-amp", "base", 128, 32)
    tiny = resolve("a100-80gb-amp", "tiny", 128, 32)
    ratio = bert_parameters(12, 768) / bert_parameters(2, 128)
    assert tiny.seq_per_s_per_device == pytest.approx(base.seq_per_s_per_device * ratio)
    assert "scaled" in tiny.source and "params" in tiny.source
    s256 = resolve("a100-80gb-amp", "large", 256, 32)
    assert s256.seq_per_s_per_device == pytest.approx(485.59 / 2) and "scaled" in s256.source
    assert "as tabled" in base.source


@pytest.mark.parametrize("kwargs,needle", [
    (dict(device="a100-80gb"), "a100-80gb"),
    (dict(device="h100"), "h100"),
    (dict(accelerators=0), "emulate.accelerators=0"),
    (dict(accelerators=-2), "emulate.accelerators=-2"),
    (dict(step_ms=-5.0), "emulate.step_ms=-5.0"),
    (dict(step_ms=0), "emulate.step_ms=0"),
    (dict(model_size="huge"), "model.size='huge'"),
    (dict(device="custom"), "custom"),
])
def test_bad_input_is_one_line_naming_the_value(kwargs, needle):
    args = dict(device="a100-80gb-amp", model_size="large", seq_len=128, batch_size=8, accelerators=1, step_ms=None)
    args.update(kwargs)
    with pytest.raises(UsageError) as ei:
        resolve(**args)
    msg = str(ei.value)
    assert needle in msg and "\n" not in msg
    if "device" in kwargs and kwargs["device"] != "custom":
        assert "did you mean 'a100-80gb-amp'" in msg or "did you mean 'h100-80gb" in msg
        assert "known profiles:" in msg and "dlio-bert-v100" in msg


def test_unknown_profile_exits_through_the_cli_error_path(capsys):
    from tfbertperf.errors import cli_entry

    @cli_entry
    def main():
        resolve("a100x", "large", 128, 8)

    with pytest.raises(SystemExit) as ei:
        main()
    assert ei.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("tfbertperf: error: emulate.device='a100x'") and err.count("\n") == 1


def test_from_config():
    from tfbertperf.config import load_config
    from tfbertperf.train.emulated_devices import from_config

    assert from_config(load_config()) is None
    e = from_config(load_config(sets=["emulate.device=a100-80gb-amp", "emulate.accelerators=4", "model.size=large",
                                      "train.batch_size=32"]))
    assert e.accelerators == 4 and e.global_batch_size == 128 and e.demand_examples_per_sec == pytest.approx(4 * 485.59)
    c = from_config(load_config(sets=["emulate.step_ms=25"]))
    assert c.device == "custom" and c.step_ms == 25.0


def test_emulated_step_is_precise_and_uses_almost_no_cpu():
    # Side by side with a bare time.sleep of the same length, interleaved: a loaded machine wakes both late by
    # the same scheduler delay, which is the machine's, not the emulation's; the emulation must never end early
    # and not later than the bare sleep (it sleeps to 0.3 ms before the deadline and spins the rest).
    step_ms, n = 20.0, 15
    late, bare, cpu, wall = [], [], 0.0, 0.0
    for _ in range(n):
        c0, t0 = time.thread_time(), time.perf_counter()  # this thread's CPU: the test process has others
        emulated_step(step_ms)
        dt = time.perf_counter() - t0
        cpu += time.thread_time() - c0
        wall += dt
        late.append(dt * 1000 - step_ms)
        t0 = time.perf_counter()
        time.sleep(step_ms / 1000)
        bare.append((time.perf_counter() - t0) * 1000 - step_ms)
    late, bare = sorted(late), sorted(bare)
    assert late[0] >= 0, "never early"
    spread = bare[3 * n // 4] - bare[n // 4]
    assert late[n // 2] <= bare[n // 2] + max(0.1, spread), f"median lateness {late[n // 2]:.3f} ms, bare {bare}"
    assert cpu < 0.10 * wall, f"cpu {cpu:.4f} s of wall {wall:.3f} s"


def test_emulated_step_counts_from_start_and_returns_at_once_when_late():
    # 50 ms gone before the call: counted from `start`, the call waits ~10 ms of the 60 (a wait from the call
    # would be 60 ms or more, whatever the machine's wake-up delay, up to 50 ms of it)
    t0 = time.perf_counter()
    time.sleep(0.05)
    waited = emulated_step(60.0, start=t0)
    assert (time.perf_counter() - t0) * 1000 >= 60.0 and waited < 60.0
    assert emulated_step(1.0, start=time.perf_counter() - 1.0) < 1.0


def test_au_definition():
    assert au(900.0, 1000.0) == pytest.approx(0.9) and au(0.0, 0.0) == 0.0
    assert au_from_steps([500.0, 100.0, 125.0], 100.0) == pytest.approx(200.0 / 225.0)  # first step excluded
    with pytest.raises(ValueError):
        au(-1.0, 10.0)
    assert math.isfinite(au(1.0, 1e-9))


def test_the_emulated_loop_times_each_step_from_its_batch_and_feeds_the_global_batch():
    """train/emulated_training.py without a model or a run (the fast tier's check of the loop the slow
    test_regime.py runs end to end): every step is at least the emulated step counted from its batch's arrival, the
    wait in next() is timed apart, the pipeline is built at accelerators × batch_size, and AU is compute ÷ wall."""
    from tfbertperf.compose.training import dataset_config
    from tfbertperf.config import load_config
    from tfbertperf.data.synthetic import synthetic_dataset_fn
    from tfbertperf.train.emulated_devices import from_config
    from tfbertperf.train.emulated_training import train_emulated

    cfg = load_config(sets=["emulate.step_ms=5", "emulate.accelerators=2", "train.batch_size=4", "train.steps=6",
                            "train.warmup_steps=1", "data.seq_len=16", "data.max_predictions=2",
                            "profile.steps=none"])
    emulation = from_config(cfg)
    data_cfg = dataset_config(cfg, emulation)
    assert data_cfg.train.batch_size == 8 == emulation.global_batch_size
    r = train_emulated(cfg, emulation, synthetic_dataset_fn(data_cfg, 100), None, progress=None, vocab_size=100)
    assert r.steps == 6 and r.global_batch_size == 8 and r.loss_trajectory == [] and r.probe_steps == 0
    assert all(s - w >= 5.0 for s, w in zip(r.step_times_ms, r.input_wait_ms))  # a sleep is never short
    e = r.extra["emulation"]
    busy = [s - w for s, w in zip(r.step_times_ms, r.input_wait_ms)]
    assert e["au"] == pytest.approx(sum(busy[1:]) / sum(r.step_times_ms[1:]), abs=1e-5) and e["au_steps"] == 5
    assert e["overrun_ms_mean"] >= -0.05 and r.compute_only_step_ms == 5.0
