"""tfbertperf.data.tokcheck: our in-graph tokenizer (tensorflow-text, as prepare builds it) against transformers'
fast BERT tokenizer on the same vocab — real libraries, real corpus, no mocks."""

from __future__ import annotations

import pytest

from tfbertperf.data.tokcheck import (
    REASONS,
    build_hf_tokenizer,
    check_parity,
    format_parity,
    texts_from_corpus,
    tokenizer_info,
)

# Hard text: accents, case folding, compatibility forms, CJK, emoji, control characters, very long words,
# special-token spellings.  "ж"/"##ж", "中"/"文" are added to the vocab so long Cyrillic words are not [UNK]
# on both sides for the same reason.
HARD = [
    "Café naïve résumé Ångström façade",
    "The Straße is long",
    "a ﬁle and ＡＢＣ",
    "中文 and 中文字 text",
    "日本語のテキスト",
    "I like 😀 and 👍🏽 ok",
    "emoji😀glued to words",
    "bell\x07ring here",
    "nul\x00byte",
    "zero\u200bwidth space",
    "bad \ufffd byte",
    "a" * 150,
    "ж" * 60,
    "ж" * 40,
    "long " + "supercalifragilistic" * 6 + " word",
    "the [MASK] token",
    "tab\tand\nnewline",
    "e\u0301 combining accent",
    "½ ² ℃ №",
]
EXTRA_TOKENS = ["中", "文", "ж", "##ж"]


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    """The vocab `prepare` learns from the default corpus (tensorflow-text's WordPiece learner), as a file."""
    from tfbertperf.data.vocab import learn_vocab, vocab_text

    tokens = learn_vocab(texts_from_corpus(""), 8000)
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text(vocab_text(tokens), encoding="utf-8")
    return str(path), tokens


def test_hf_tokenizer_has_our_vocab_id_for_id(vocab):
    path, tokens = vocab
    hf = build_hf_tokenizer(path, lower_case=True)
    assert hf.is_fast
    assert len(hf.get_vocab()) == len(tokens) > 1000  # not the 5-token vocab of BertTokenizer(vocab_file=…)
    ids = hf("The statement", add_special_tokens=True)["input_ids"]
    assert ids == [tokens.index("[CLS]"), tokens.index("the"), tokens.index("statement"), tokens.index("[SEP]")]
    assert hf.convert_tokens_to_ids(tokens[-1]) == len(tokens) - 1


def test_parity_on_the_default_corpus(vocab):
    import tensorflow_text

    from tfbertperf.data.vocab import make_tokenizer, tokenize_sentences

    path, tokens = vocab
    texts = texts_from_corpus("")
    doc = check_parity(texts, path, lower_case=True)
    print(f"default corpus: {doc['identical']}/{doc['sequences']} identical "
          f"({100 * doc['identical_share']:.2f}%), reasons {doc['reasons']}")
    assert doc["sequences"] == len(texts) > 5000
    assert doc["identical_share"] >= 0.99
    assert set(doc["reasons"]) <= set(REASONS) and sum(doc["reasons"].values()) == len(texts) - doc["identical"]
    assert doc["ours"] == {"library": "tensorflow-text", "version": tensorflow_text.__version__,
                           "tokenizer": "FastBertTokenizer", "lower_case": True}
    assert doc["hf"]["library"] == "transformers" and doc["hf"]["lower_case"] is True
    assert doc["vocab_sha256"] == tokenizer_info(path, True)["vocab_sha256"]
    # "ours" is the tokenizer prepare writes shards with: HF agrees with it exactly as often as the check says.
    hf = build_hf_tokenizer(path, lower_case=True)
    prepared = tokenize_sentences(make_tokenizer(tokens), texts)
    theirs = hf(texts, add_special_tokens=False)["input_ids"]
    assert sum(a == b for a, b in zip(prepared, theirs)) == doc["identical"]
    text = format_parity(doc)
    assert f"{doc['identical']} of {doc['sequences']} sequences identical" in text


def test_hard_text_differences_have_reasons(vocab):
    _, tokens = vocab
    doc = check_parity(HARD, tokens + EXTRA_TOKENS, lower_case=True, max_examples_shown=len(HARD))
    print(f"hard text: {doc['identical']}/{doc['sequences']} identical ({100 * doc['identical_share']:.1f}%), "
          f"reasons {doc['reasons']}")
    print(format_parity(doc))
    assert 0 < doc["identical_share"] < 1
    why = {d["text"]: d["reason"] for d in doc["differences"]}
    assert len(why) == doc["sequences"] - doc["identical"]
    assert why["The Straße is long"] == "casing/accents"  # ß: case folding (ours) vs lower-casing (HF)
    assert why["a ﬁle and ＡＢＣ"] == "casing/accents"  # NFKC compatibility forms: only ours folds them
    assert why["bell\x07ring here"] == why["nul\x00byte"] == why["bad \ufffd byte"] == "control characters"
    assert why["ж" * 60] == "max-chars-per-word"  # 120 UTF-8 bytes > 100 (ours), 60 characters ≤ 100 (HF)
    assert why["the [MASK] token"] == "special tokens in text"
    for same in ("Café naïve résumé Ångström façade", "中文 and 中文字 text", "日本語のテキスト", "a" * 150, HARD[14],
                 "ж" * 40, "I like 😀 and 👍🏽 ok", "tab\tand\nnewline"):
        assert same not in why, (same, why.get(same))  # accents stripped, CJK split, ASCII limit: alike
    for d in doc["differences"]:
        assert d["reason"] in REASONS and d["ours"] != d["hf"]


def test_planted_casing_mismatch_is_named(vocab):
    path, _ = vocab
    texts = texts_from_corpus("", limit=400)
    doc = check_parity(texts, path, lower_case=True, hf_lower_case=False)  # uncased vocab, cased HF tokenizer
    print(f"planted casing mismatch: {100 * doc['identical_share']:.1f}% identical, reasons {doc['reasons']}")
    assert doc["identical_share"] < 0.8
    assert next(iter(doc["reasons"])) == "casing/accents"
    assert doc["reasons"]["casing/accents"] >= 0.95 * (doc["sequences"] - doc["identical"])
    assert doc["hf"]["lower_case"] is False and doc["ours"]["lower_case"] is True


def test_texts_from_a_user_file_and_limit(tmp_path):
    f = tmp_path / "corpus.txt"
    f.write_text("First sentence.\nSecond one.\n\nThird, another document.\nFourth.\n", encoding="utf-8")
    assert texts_from_corpus(str(f)) == ["First sentence.", "Second one.", "Third, another document.", "Fourth."]
    assert texts_from_corpus(str(f), limit=2) == ["First sentence.", "Third, another document."]
    every = texts_from_corpus("")
    some = texts_from_corpus(None, limit=100)
    assert len(some) == 100 and some[0] == every[0] and some[-1] in every[-len(every) // 100 - 1 :]


def test_tokenizer_info_for_the_report(vocab):
    from tfbertperf.data.vocab import vocab_sha256

    path, tokens = vocab
    info = tokenizer_info(path, lower_case=True)
    assert info["library"] == "tensorflow-text" and info["lower_case"] is True
    assert info["vocab_sha256"] == vocab_sha256(tokens) and len(info["version"].split(".")) >= 2
