"""Issue 17, memory: what the train step keeps for its backward pass, the hand-differentiated exact GELU, and
train.remat (blocks recomputed in the backward pass, with the forward pass's dropout masks)."""

import numpy as np
import pytest

from tfbertperf.config import load_config
from tfbertperf.errors import UsageError

B, T, P, V = 4, 32, 5, 200


def _batch(seed=0):
    rng = np.random.default_rng(seed)
    return {"input_ids": rng.integers(0, V, (B, T)), "input_mask": np.ones((B, T), "int64"),
            "segment_ids": np.zeros((B, T), "int64"), "masked_lm_positions": rng.integers(0, T, (B, P)),
            "masked_lm_ids": rng.integers(0, V, (B, P)), "masked_lm_weights": np.ones((B, P), "float32"),
            "next_sentence_labels": np.zeros((B, 1), "int64")}


def _step(remat=False, gelu=None):
    import keras
    import tensorflow as tf

    from tfbertperf.model import bert, build
    from tfbertperf.train.optimizer import make_optimizer
    from tfbertperf.train.step import make_train_step

    keras.utils.set_random_seed(7)
    cfg = load_config(overrides={"model.task": "pretrain"})
    if gelu is not None:
        old, bert.gelu = bert.gelu, gelu
    try:
        model = build.build_model(cfg.model, V, T, P, remat=remat)
    finally:
        if gelu is not None:
            bert.gelu = old
    opt = make_optimizer(cfg.train, model.trainable_variables)
    batch = {k: tf.constant(v) for k, v in _batch().items()}
    spec = {k: tf.TensorSpec(v.shape, v.dtype) for k, v in batch.items()}
    return make_train_step(model, opt, tf.distribute.get_strategy(), "pretrain"), batch, spec, model, opt


def test_gelu_exact_has_tf_gelus_values_and_gradient():
    import tensorflow as tf

    from tfbertperf.model.lowmem import gelu_exact

    x = tf.constant(np.linspace(-6, 6, 1001), tf.float32)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        ours, ref = gelu_exact(x), tf.nn.gelu(x, approximate=False)
    assert np.array_equal(ours.numpy(), ref.numpy())  # the same forward op
    np.testing.assert_allclose(tape.gradient(ours, x).numpy(), tape.gradient(ref, x).numpy(), atol=2e-6)


def test_step_keeps_less_for_backward_than_autodiffed_gelu():
    # Stock autodiff of tf.nn.gelu keeps 0.5·x, erfc(·) and their product's inputs: 3 more (B, T, 4H) tensors
    # per layer than ours (x and the output the down projection reads).
    import keras

    from tfbertperf.train.memory import kept_for_backward, traced_graph

    step, _, spec, model, _ = _step()
    ours = kept_for_backward(traced_graph(step, spec))
    stock = kept_for_backward(traced_graph(_step(gelu=lambda x: keras.activations.gelu(x, approximate=False))[0],
                                           spec))
    cfg = model.bert_config
    ffn_tensor = B * T * cfg.intermediate * 4
    assert "Erfc" in stock["by_op"] and "Erfc" not in ours["by_op"]
    assert stock["bytes"] - ours["bytes"] >= 2 * ffn_tensor * cfg.num_layers, (stock["bytes"], ours["bytes"])


def test_remat_keeps_only_block_inputs_and_trains_on_the_same_masks():
    from tfbertperf.train.memory import kept_for_backward, traced_graph

    plain, batch, spec, _, _ = _step()
    remat, *_ = _step(remat=True)
    assert kept_for_backward(traced_graph(remat, spec))["bytes"] < 0.5 * kept_for_backward(
        traced_graph(plain, spec))["bytes"]
    a = [plain(batch).numpy() for _ in range(3)]
    b = [remat(batch).numpy() for _ in range(3)]
    np.testing.assert_allclose(a, b, rtol=1e-5)  # same dropout masks in the recomputation, same losses
    assert a[0][0] != a[1][0]  # and the steps did train


def test_preflight_refuses_a_step_that_cannot_fit(monkeypatch):
    from tfbertperf.train import memory

    step, _, spec, model, opt = _step()
    fits = memory.preflight(step, spec, model, opt, remat=False)
    assert fits["need_bytes"] == fits["activations_bytes"] + fits["state_bytes"] > 0
    monkeypatch.setattr(memory, "available_bytes", lambda: fits["need_bytes"] - 1)
    with pytest.raises(UsageError, match=r"train step needs .* GiB.*train.batch_size or --set train.remat=true"):
        memory.preflight(step, spec, model, opt, remat=False)


def test_check_step_traces_the_shape_the_first_step_runs_and_says_the_figures():
    import tensorflow as tf

    from tfbertperf.train.memory import check_step

    step, batch, _, model, opt = _step()
    ds = tf.data.Dataset.from_tensors(batch).repeat()
    iterator = iter(ds.unbatch().batch(B, drop_remainder=False))  # element_spec's batch dimension is None
    lines = []
    out = check_step(step, iterator, B, model, opt, False, lines.append)
    assert out and len(lines) == 1 and lines[0].startswith("memory: the step keeps ")
    step(next(iterator))
    assert step.experimental_get_tracing_count() == 1  # the first step reused the preflight's trace


def test_probe_snapshot_restore_leaves_no_second_copy_of_the_state(monkeypatch):
    # Checkpoint.read(...) kept a restored copy of every variable alive after the restore: BERT-base's RSS rose
    # by its whole state (+1.1 GB), BERT-large's by 3.7 GB.  Per-variable reads leave at most one variable's.
    import gc

    import psutil
    import tensorflow as tf

    from tfbertperf.train import probe
    from tfbertperf.train.probe import Snapshot

    state = [tf.Variable(tf.random.normal((2048, 2048), seed=i)) for i in range(8)]  # 8 × 16 MiB
    size = sum(v.numpy().nbytes for v in state)
    monkeypatch.setattr(probe, "HOST_COPY_BYTES", size // 2)  # the checkpoint path: a state too big to copy
    before = [v.numpy() for v in state]
    snap = Snapshot(state)
    for v in state:
        v.assign(tf.zeros_like(v))
    gc.collect()
    rss0 = psutil.Process().memory_info().rss
    snap.restore()
    gc.collect()
    grew = psutil.Process().memory_info().rss - rss0
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(before, state))
    assert grew < size / 2, (grew, size)
