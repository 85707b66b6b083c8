"""BERT's optimizer, as google-research/bert's `AdamWeightDecayOptimizer`, in Keras 3."""

from __future__ import annotations

# Variable names AdamW leaves undecayed (google-research/bert optimization.py excludes "LayerNorm", "layer_norm"
# and "bias"; our LayerNorms' parameters are gamma and beta).
NO_WEIGHT_DECAY = ["bias", "gamma", "beta"]


def make_optimizer(train_cfg, variables):
    """BERT's optimizer: AdamW (weight decay 0.01, epsilon 1e-6) without decay on LayerNorm parameters and biases
    (as google-research/bert's AdamWeightDecayOptimizer), loss-scaled under mixed_float16.  Built up front, so the
    first traced step sees the optimizer's real variables (and loss scale)."""
    import keras

    optimizer = keras.optimizers.AdamW(learning_rate=train_cfg.learning_rate, weight_decay=0.01, epsilon=1e-6)
    optimizer.exclude_from_weight_decay(var_names=NO_WEIGHT_DECAY)
    if train_cfg.precision == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    optimizer.build(variables)
    return optimizer
