"""What BERT's backward pass keeps in memory, and two ways to keep less (issue 17).

Measured on BERT-base, batch 32 × 128 tokens (tools/bench/bench_memory.py lists the forward tensors the
backward pass reads, by op): TF's exact GELU (`tf.nn.gelu(approximate=False)` = 0.5·x·erfc(−x/√2)) leaves
three (B, T, 4H) intermediates for autodiff in every layer — 3 × 48 MiB × 12 layers = 1.7 GiB, more than all
attention probabilities together.  `gelu_exact` computes the same forward op and differentiates it by hand
from x alone, so the step keeps x and the output (which the down projection needs anyway) instead.

`train.remat` (opt-in; `Block(remat=True)`) goes further: each transformer block is recomputed in the backward
pass (keras.remat = tf.recompute_grad), so only the blocks' inputs stay alive between forward and backward — at
the cost of running each block's forward pass twice per step (in FLOPs about +1/3 of a step; measured on
this CPU 1.18× for BERT-mini and 1.85× for BERT-base at batch 32: BENCHMARKS.md, issue 17).  Recomputation must draw the same dropout masks
as the forward pass did: the block draws its dropout seeds *outside* the recomputed function and passes them
in (`SeededDropout`), so the masks — and the losses — are the ones the default path produces.
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf

_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


@tf.custom_gradient
def _gelu_exact(x):
    y = tf.nn.gelu(x, approximate=False)  # the very op (and values) keras.activations.gelu(approximate=False) runs

    def grad(dy):
        # d/dx [x·Φ(x)] = Φ(x) + x·φ(x); Φ(x) = erfc(−x/√2)/2 as TF computes it; φ the normal density.
        cdf = 0.5 * tf.math.erfc(-x * tf.cast(1.0 / math.sqrt(2.0), x.dtype))
        pdf = tf.exp(-0.5 * x * x) * tf.cast(_INV_SQRT_2PI, x.dtype)
        return dy * (cdf + x * pdf)

    return y, grad


def gelu_exact(x):
    """BERT's exact (erf) GELU; its gradient reads only x (autodiff of tf.nn.gelu keeps 3 more tensors of x's
    shape per call)."""
    return _gelu_exact(tf.convert_to_tensor(x))


def _cast_seed(seed):
    # As keras' TF backend does before every stateless random op: int64 seed state → int32 (XLA needs int32).
    return seed if seed.dtype == tf.int32 else tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)


class SeededDropout(keras.layers.Dropout):
    """keras.layers.Dropout whose seed can be drawn ahead (`draw()`) and passed in, for recomputation.

    Without `seed` it draws from its own generator exactly as keras.layers.Dropout does (same variable, same
    stateless op), so a model built with it trains on the same masks as one built with the stock layer.
    """

    def draw(self):
        return self.seed_generator.next()

    def call(self, inputs, training=False, seed=None):
        if not training or self.rate == 0:
            return inputs
        seed = self.draw() if seed is None else seed
        return tf.nn.experimental.stateless_dropout(inputs, rate=self.rate, seed=_cast_seed(seed))


def recomputed(fn):
    """fn(*tensors) → tensor, recomputed in the backward pass instead of keeping its intermediates."""
    return keras.remat(fn)


__all__ = ["gelu_exact", "SeededDropout", "recomputed"]
