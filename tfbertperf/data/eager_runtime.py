"""TensorFlow's eager runtime for data preparation, without the `tensorflow` package's __init__.

`import tensorflow` first builds the whole public API: tf.*, tf.compat.v1, tf.distribute, feature columns and
Keras (TF 2.21 imports keras.src.optimizers eagerly) — 3-4 s of a 2-core VM's start (`python -X importtime`:
~2.8 s in tensorflow._api.v2.__internal__ and Keras alone), longer than making the examples of a 5 MB corpus.
Preparation runs one kind of op, tensorflow-text's FastBertTokenizer on a string tensor, eagerly, and reads the
ragged ids back as numpy; that needs tensorflow.python's framework, eager and ragged modules and the tokenizer's
two op libraries, nothing of the public API.

`runtime()` loads just those: while they load, `tensorflow` stands in sys.modules as a bare namespace package (its
__path__, no __init__), as fast_bert_tokenizer_class does for tensorflow-text; TF2 behaviour is switched
on as the __init__ would (`v2_compat.enable_v2_behavior`); then the stand-in is removed.  A later `import
tensorflow` in the same process (a run that trains after preparing its data) runs the real __init__, which
reuses the modules already loaded.  Where `tensorflow` is already imported, it is used as it is.  The ops, the
kernels and so the ids are TensorFlow's own either way (tests/test_prep_routes.py checks the bytes against a
process that imported TensorFlow).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
import types
from types import SimpleNamespace

_runtime: SimpleNamespace | None = None


def runtime() -> SimpleNamespace:
    """SimpleNamespace(constant, string, int64, tokenizer_class, partial): tf.constant, the two dtypes and
    tensorflow_text's FastBertTokenizer; partial=True when loaded without the package's __init__."""
    global _runtime
    if _runtime is None:
        tf = sys.modules.get("tensorflow")
        if tf is not None and hasattr(tf, "constant"):  # TensorFlow is imported: use it
            _runtime = _from_modules(partial=False)
        else:
            from tfbertperf.errors import quiet_tf_logs_installed, run_filtering_tf_lines

            _runtime = run_filtering_tf_lines(_load_partial) if quiet_tf_logs_installed() else _load_partial()
    return _runtime


def _from_modules(partial: bool) -> SimpleNamespace:
    from tensorflow.python.framework import constant_op, dtypes

    return SimpleNamespace(constant=constant_op.constant, string=dtypes.string, int64=dtypes.int64,
                           tokenizer_class=fast_bert_tokenizer_class(), partial=partial)


def _load_partial() -> SimpleNamespace:
    if "tensorflow" in sys.modules:  # another stand-in (or a half-done import): do not touch it
        import tensorflow  # noqa: F401  (the real package, or the error of whoever is importing it)

        return _from_modules(partial=False)
    # Found by the path finder, not through sys.meta_path: errors._QuietImport must stay for the real import.
    spec = importlib.machinery.PathFinder.find_spec("tensorflow")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("tensorflow is not installed")
    stand_in = types.ModuleType("tensorflow")
    stand_in.__path__ = list(spec.submodule_search_locations)
    sys.modules["tensorflow"] = stand_in
    try:
        v2_compat = importlib.import_module("tensorflow.python.compat.v2_compat")
        v2_compat.enable_v2_behavior()  # as tensorflow/__init__.py does: eager execution, TF2 semantics
        return _from_modules(partial=True)
    finally:
        if sys.modules.get("tensorflow") is stand_in:
            del sys.modules["tensorflow"]


def fast_bert_tokenizer_class():
    """tensorflow_text.FastBertTokenizer, without importing the rest of tensorflow-text when nothing has yet: its
    package loads ~20 op libraries (~100 MB resident) that preparation never uses, which is what kept a preparing
    process above google-research's script in memory.  The package's __init__ files are bypassed only while the
    tokenizer's three modules load; a later `import tensorflow_text` runs them and reuses those modules."""
    if "tensorflow_text" in sys.modules:
        return sys.modules["tensorflow_text"].FastBertTokenizer
    root = importlib.util.find_spec("tensorflow_text").submodule_search_locations[0]
    stubs = {}
    for name, sub in (("tensorflow_text", ""), ("tensorflow_text.python", "python"),
                      ("tensorflow_text.python.ops", "python/ops")):
        stubs[name] = sys.modules[name] = types.ModuleType(name)
        stubs[name].__path__ = [os.path.join(root, sub)]
    try:
        return importlib.import_module("tensorflow_text.python.ops.fast_bert_tokenizer").FastBertTokenizer
    finally:
        for name, module in stubs.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]
