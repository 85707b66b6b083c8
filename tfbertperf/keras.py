"""Public import path for the Keras integration: `from tfbertperf.keras import ProfileCallback`.

The callback lives in the profile stage, one per Keras backend: tfbertperf/profile/keras_callback.py (TensorFlow:
tf.profiler, the thread record and the what-if probe; its docstring says how it works) and
tfbertperf/keras_jax.py (JAX: jax.profiler and the step file, through tfbertperf.jax_steps.StepTimer).
This module names the one for the backend Keras runs on (`KERAS_BACKEND`); another backend gets the TensorFlow
class, which refuses it in one line.
"""

import keras

if keras.backend.backend() == "jax":
    from tfbertperf.keras_jax import ProfileCallback
else:
    from tfbertperf.profile.keras_callback import ProfileCallback

__all__ = ["ProfileCallback"]
