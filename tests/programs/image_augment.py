"""A foreign program of another shape: image classification with augmentation in a parallel map + prefetch.

A small Keras CNN on 64×64 RGB images; the input pipeline decodes nothing (images are in memory) but augments
every image per example in a `map(num_parallel_calls=2)` — random crop after padding, flip, brightness/contrast
jitter, a 3×3 blur — then batches and prefetches.  Modes and output: tests/programs/harness.py.

    python tests/programs/image_augment.py --out /tmp/img
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from harness import keras_step, main  # noqa: E402

SIZE, BATCH = 64, 32


def augment(img, label):
    img = tf.image.convert_image_dtype(img, tf.float32)
    img = tf.image.resize_with_crop_or_pad(img, SIZE + 8, SIZE + 8)
    img = tf.image.random_crop(img, (SIZE, SIZE, 3))
    img = tf.image.random_flip_left_right(img)
    img = tf.image.random_brightness(img, 0.2)
    img = tf.image.random_contrast(img, 0.8, 1.2)
    k = tf.ones((3, 3, 3, 1)) / 9.0
    img = tf.nn.depthwise_conv2d(img[None], k, (1, 1, 1, 1), "SAME")[0]
    return img, label


def make_dataset(kind: str) -> tf.data.Dataset:
    rng = np.random.default_rng(0)
    xs = rng.integers(0, 256, size=(2048, SIZE, SIZE, 3), dtype=np.uint8)
    ys = rng.integers(0, 10, size=(2048,)).astype("int64")
    ds = tf.data.Dataset.from_tensor_slices((xs, ys)).repeat().map(augment, num_parallel_calls=2)
    ds = ds.batch(BATCH, drop_remainder=True)
    if kind == "memory":
        ds = tf.data.Dataset.from_tensors(next(iter(ds))).repeat()
    return ds.prefetch(2)


def make_step():
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([
        tf.keras.Input((SIZE, SIZE, 3)),
        tf.keras.layers.Conv2D(16, 3, activation="relu"), tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Conv2D(32, 3, activation="relu"), tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Conv2D(32, 3, activation="relu"), tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dense(10)])
    return keras_step(tf, model)


if __name__ == "__main__":
    main(tf, make_dataset, make_step, __doc__)
