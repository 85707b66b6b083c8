"""model stage (see shared/DESIGN.md): Keras 3 BERT encoder + task heads, sizes tiny … large (bert.py); build.py
puts a model together; hf_import and hf_preflight load a local Hugging Face BERT directory (`--set model.init=DIR`)."""

from tfbertperf.model.bert import (  # noqa: F401
    SIZES,
    BertConfig,
    build_encoder,
    config_for,
    describe,
    encoder_parameters,
    parameter_line,
)
from tfbertperf.model.build import build_model  # noqa: F401
