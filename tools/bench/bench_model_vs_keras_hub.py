"""Our BERT vs keras-hub's BertBackbone: training examples/s for the same shape, side by side in one run.

Both models get the same classifier head (Dense(num_labels) on the pooled [CLS] output), the same custom
tf.function train step (AdamW, cross-entropy), the same in-memory batch (so no input pipeline is measured),
the same seq_len / batch / precision / jit setting. Timing alternates between the two models in rounds so a
noisy, shared machine slows both equally; the figure is the ratio of median step times.

  python tools/bench/bench_model_vs_keras_hub.py --size tiny --seq-len 128 --batch 32 --rounds 5 --steps 10

Prints one line per size and the ratio ours ÷ keras-hub (examples/s; > 1.0 = ours faster).
Needs `pip install keras-hub` (setup.cfg extra `bench`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", action="append", help="model size(s): tiny mini small medium base large (repeatable)")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--vocab", type=int, default=30522)
    p.add_argument("--precision", default="float32", choices=["float32", "mixed_float16", "mixed_bfloat16"])
    p.add_argument("--jit", action="store_true", help="XLA-compile both train steps")
    p.add_argument("--rounds", type=int, default=5, help="alternating timing rounds")
    p.add_argument("--steps", type=int, default=10, help="timed steps per model per round")
    a = p.parse_args(argv)

    import keras
    import numpy as np
    import tensorflow as tf

    try:
        import keras_hub
    except ImportError:
        print("keras-hub is not installed: pip install 'tfbertperf[bench]' (or pip install keras-hub)", file=sys.stderr)
        return 2

    from tfbertperf.config import load_config
    from tfbertperf.model import build_model, config_for

    keras.mixed_precision.set_global_policy(a.precision)
    keras.utils.set_random_seed(0)
    print(f"tensorflow {tf.__version__}, keras {keras.__version__}, keras-hub {keras_hub.__version__}; "
          f"seq_len {a.seq_len}, batch {a.batch}, vocab {a.vocab}, precision {a.precision}, jit {a.jit}")

    rng = np.random.default_rng(0)
    B, T = a.batch, a.seq_len
    ids = rng.integers(5, a.vocab, (B, T)).astype("int32")
    mask = np.ones((B, T), "int32")
    mask[:, T * 3 // 4:] = 0  # a quarter of padding, like real sentence pairs
    segments = (np.arange(T)[None, :] >= T // 2).astype("int32").repeat(B, 0)
    labels = rng.integers(0, 2, (B,)).astype("int32")

    for size in a.size or ["tiny", "mini"]:
        cfg = config_for(size, a.vocab)
        # Ours: the classify task = encoder + pooler + Dense(2).
        ours = build_model(load_config(overrides={"model.task": "classify", "model.size": size}).model,
                           a.vocab, T)
        ours_batch = {"input_ids": ids, "input_mask": mask, "segment_ids": segments}

        # keras-hub: BertBackbone of the same shape + the same head on its pooled output.
        backbone = keras_hub.models.BertBackbone(
            vocabulary_size=a.vocab, num_layers=cfg.num_layers, num_heads=cfg.num_heads, hidden_dim=cfg.hidden,
            intermediate_dim=cfg.intermediate, dropout=cfg.dropout, max_sequence_length=cfg.max_positions,
        )
        inputs = {k: keras.Input((T,), dtype="int32", name=k) for k in ("token_ids", "segment_ids", "padding_mask")}
        pooled = backbone(inputs)["pooled_output"]
        hub = keras.Model(inputs, {"logits": keras.layers.Dense(2, dtype="float32")(pooled)})
        hub_batch = {"token_ids": ids, "segment_ids": segments, "padding_mask": mask}

        ours_params = ours.count_params() - (cfg.hidden * 2 + 2)
        hub_params = backbone.count_params()
        steps = {}
        for name, model, batch in (("ours", ours, ours_batch), ("keras-hub", hub, hub_batch)):
            steps[name] = _make_step(model, batch, labels, a.precision, a.jit)
        times = {"ours": [], "keras-hub": []}
        for name, step in steps.items():  # warm-up: trace/compile both before any timing
            for _ in range(3):
                step()
        for _ in range(a.rounds):
            for name, step in steps.items():
                for _ in range(a.steps):
                    t0 = time.perf_counter()
                    step()
                    times[name].append((time.perf_counter() - t0) * 1e3)
        med = {k: statistics.median(v) for k, v in times.items()}
        eps = {k: B * 1e3 / v for k, v in med.items()}
        print(f"{size:6s} L{cfg.num_layers}/H{cfg.hidden}/A{cfg.num_heads}  params(encoder+pooler) ours "
              f"{ours_params:,} keras-hub {hub_params:,}  |  ours {eps['ours']:.1f} ex/s ({med['ours']:.1f} ms/step)"
              f"  keras-hub {eps['keras-hub']:.1f} ex/s ({med['keras-hub']:.1f} ms/step)"
              f"  |  ratio ours/keras-hub {eps['ours'] / eps['keras-hub']:.3f}", flush=True)
    return 0


def _make_step(model, batch, labels, precision, jit):
    import keras
    import tensorflow as tf

    optimizer = keras.optimizers.AdamW(1e-4, weight_decay=0.01)
    if precision == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    optimizer.build(model.trainable_variables)
    features = {k: tf.constant(v) for k, v in batch.items()}
    y = tf.constant(labels)

    @tf.function(jit_compile=jit)
    def step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)["logits"]
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return lambda: float(step(features, y))  # host pull: the step is finished when timing stops


if __name__ == "__main__":
    sys.exit(main())
