"""model stage (see shared/DESIGN.md): Keras 3 BERT encoder + task heads, sizes tiny … large; hf_import and
hf_preflight load a local Hugging Face BERT directory (`--set model.init=DIR`)."""

from tfbertperf.model.bert import (  # noqa: F401
    SIZES,
    BertConfig,
    build_encoder,
    build_model,
    config_for,
    describe,
    encoder_parameters,
    parameter_line,
)
