"""Redaction hides secret values but keeps ordinary fields whose names merely contain a secret word."""

from tfbertperf.redact import REDACTED, redact_obj, redact_text


def test_secret_values_are_redacted_in_objects_and_text():
    doc = redact_obj({"AZURE_STORAGE_KEY": "k3y", "HF_TOKEN": "hf_abc", "nested": [{"AccountKey": "zzz"}],
                      "url": "https://acct.blob.core.windows.net/c?sv=2024&sig=S1GN"})
    text = str(doc)
    for secret in ("k3y", "hf_abc", "zzz", "S1GN"):
        assert secret not in text
    assert doc["AZURE_STORAGE_KEY"] == REDACTED
    conn = "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=Eby8vdM02x==;BlobEndpoint=x"
    assert "Eby8vdM02x" not in redact_text(conn)
    assert "Bearer" in redact_text("Authorization: Bearer abcdefghijklmnop") and "abcdefghijklmnop" not in \
        redact_text("Authorization: Bearer abcdefghijklmnop")


def test_ordinary_fields_that_contain_secret_words_survive():
    cfg = {"pipeline": {"tokenize": "inline"}, "throughput": {"tokens_per_sec": 12.5}}
    assert redact_obj(cfg) == cfg
    assert redact_text("--set pipeline.tokenize=inline") == "--set pipeline.tokenize=inline"
