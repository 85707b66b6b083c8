"""Public import path for the Keras integration: `from tfbertperf.keras import ProfileCallback`.

The callback lives in the profile stage (tfbertperf/profile/keras_callback.py, where its docstring says how it
works); this module only names it for users' code.
"""

from tfbertperf.profile.keras_callback import ProfileCallback

__all__ = ["ProfileCallback"]
