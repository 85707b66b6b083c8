"""WordPiece vocabulary (learned with tensorflow-text, or the user's vocab.txt) and the one tokenizer every path
uses: tensorflow-text's FastBertTokenizer, lower-casing (NFD + accent strip, as uncased BERT).

The same `make_tokenizer(vocab)` serves data preparation (pre-tokenized shards) and `pipeline.tokenize=inline`
(tokenization inside tf.data), so both paths produce identical ids.
"""

from __future__ import annotations

import hashlib
import os

from tfbertperf.errors import UsageError

# Reserved tokens come first, so [PAD] = 0 (the padding id of every feature) and the ids below are fixed.
RESERVED_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = 0, 1, 2, 3, 4

# Learning the vocab costs ~4 s on the 465 KB default corpus (2 cores); bigger user corpora are sampled down to
# about this much text so `prepare` stays well under a minute.
VOCAB_SAMPLE_BYTES = 2_000_000


def vocab_sha256(tokens: list[str]) -> str:
    """sha256 of the vocab file content as written by `vocab_text` (one token per line, trailing newline)."""
    return hashlib.sha256(vocab_text(tokens).encode("utf-8")).hexdigest()


def vocab_text(tokens: list[str]) -> str:
    return "".join(t + "\n" for t in tokens)


def parse_vocab(text: str, name: str) -> list[str]:
    """vocab.txt content → token list (line i = id i).  Checks the special tokens the examples need."""
    tokens = [line.rstrip("\r") for line in text.split("\n")]
    if tokens and tokens[-1] == "":
        tokens.pop()
    if not tokens:
        raise UsageError(f"vocab {name}: empty")
    missing = [t for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]") if t not in tokens]
    if missing:
        raise UsageError(f"vocab {name}: missing special token(s) {', '.join(missing)}")
    if tokens[0] != "[PAD]":
        raise UsageError(f"vocab {name}: [PAD] must be id 0 (line 1), found {tokens[0]!r}")
    if len(set(tokens)) != len(tokens):
        dup = next(t for i, t in enumerate(tokens) if t in tokens[:i])
        raise UsageError(f"vocab {name}: duplicate token {dup!r}")
    return tokens


def special_ids(tokens: list[str]) -> dict[str, int]:
    """Ids of [PAD] [UNK] [CLS] [SEP] [MASK] in `tokens` (a user vocab may order them differently)."""
    return {t: tokens.index(t) for t in RESERVED_TOKENS}


def load_vocab_file(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return parse_vocab(f.read(), path)
    except FileNotFoundError:
        raise UsageError(f"vocab {path}: no such file (--set data.vocab=…)") from None
    except UnicodeDecodeError:
        raise UsageError(f"vocab {path}: not UTF-8 text") from None


# What learn_vocab's result depends on besides the text and the size (the learned-vocab cache's key): change it
# with any of the learner's settings below.
LEARNER_SETTINGS = "wordpiece-learner/1 lower_case upper=1e7 lower=1 iterations=4 max_tokens=5e6 len=50 chars=1000 " \
                   "slack=0.05 joiner=## reserved=" + ",".join(RESERVED_TOKENS)


def learn_vocab(sentences: list[str], vocab_size: int) -> list[str]:
    """Learn a lower-cased WordPiece vocab of at most `vocab_size` tokens from `sentences` with tensorflow-text's
    WordPiece learner (what `bert_vocab_from_dataset` runs); reserved tokens first ([PAD]=0).  A small corpus
    yields fewer tokens than asked (the learner cannot invent words): the manifest records the real size.

    Same words (BERT basic tokenizer, lower_case=True) and same learner as `bert_vocab_from_dataset`; one
    shortcut: the learner binary-searches a count threshold from 10 million down, one full learning pass per
    probe (~1 s each here), even when the corpus cannot reach `vocab_size` at all.  We first learn at the
    lowest threshold (1): if that vocab already fits, the search would end there too, so it is the answer
    (1 pass instead of ~12 on the default corpus).  Deterministic: a sample (every k-th sentence) is taken
    when the text exceeds VOCAB_SAMPLE_BYTES."""
    import tensorflow as tf
    from tensorflow_text.python.ops.bert_tokenizer import BasicTokenizer
    from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as lib

    total = sum(len(s) for s in sentences)
    if total > VOCAB_SAMPLE_BYTES:
        step = -(-total // VOCAB_SAMPLE_BYTES)
        sentences = sentences[::step]
    ds = tf.data.Dataset.from_tensor_slices(tf.constant(sentences, dtype=tf.string)).batch(1024)
    words = ds.map(BasicTokenizer(lower_case=True).tokenize)
    word_counts = list(lib.count_words(words).items())
    # lower_thresh=1: a ~0.5 MB corpus has only a few thousand distinct words; the default (10) would stop the
    # search near 1,200 tokens.
    params = lib.Params(upper_thresh=int(1e7), lower_thresh=1, num_iterations=4, max_input_tokens=int(5e6),
                        max_token_length=50, max_unique_chars=1000, vocab_size=vocab_size, slack_ratio=0.05,
                        include_joiner_token=True, joiner="##", reserved_tokens=list(RESERVED_TOKENS))
    upper, lower = lib.get_search_threshs(word_counts, params.upper_thresh, params.lower_thresh)
    all_counts = lib.get_input_words(word_counts, params.reserved_tokens, params.max_token_length)
    allowed = lib.get_allowed_chars(all_counts, params.max_unique_chars)
    filtered = lib.filter_input_words(all_counts, allowed, params.max_input_tokens)
    largest = lib.learn_with_thresh(filtered, lower, params)
    if len(largest) <= vocab_size:
        return list(largest)
    return list(lib.learn_binary_search(filtered, lower, upper, params))


def make_tokenizer(tokens: list[str]):
    """The FastBertTokenizer used everywhere: lower-case + NFD + strip accents, '##' continuation, int64 ids.
    Made on TensorFlow's eager runtime alone where TensorFlow is not imported yet (data/eager_runtime.py)."""
    from tfbertperf.data.eager_runtime import runtime

    rt = runtime()
    return rt.tokenizer_class(
        vocab=list(tokens),
        suffix_indicator="##",
        token_out_type=rt.int64,
        unknown_token="[UNK]",
        lower_case_nfd_strip_accents=True,
    )


def tokenize_sentences(tokenizer, sentences: list[str], batch: int = 4096) -> list[list[int]]:
    """Token ids of each sentence (wordpieces of all its words, in order), as Python lists."""
    from tfbertperf.data.eager_runtime import runtime

    rt = runtime()
    out: list[list[int]] = []
    for i in range(0, len(sentences), batch):
        ids = tokenizer.tokenize(rt.constant(sentences[i : i + batch], dtype=rt.string))  # [B, (tokens)]
        out.extend(ids.to_list())
    return out


def choose_vocab(cfg, sentences, say) -> tuple[list[str], str]:
    """data.vocab, or a vocab learned from `sentences` (a list, or a function returning one); (tokens, source)."""
    import time

    if cfg.data.vocab:
        tokens = load_vocab_file(cfg.data.vocab)
        say(f"vocab: {len(tokens)} tokens from {cfg.data.vocab}")
        return tokens, os.path.basename(cfg.data.vocab)
    t = time.perf_counter()
    sentences = sentences() if callable(sentences) else sentences
    cache = learned_vocab_cache_path(sentences, cfg.data.vocab_size)
    tokens = _cached_vocab(cache)
    if tokens is not None:
        say(f"vocab: {len(tokens)} WordPiece tokens (target {cfg.data.vocab_size}) learned from the same text before "
            f"({cache})")
        return tokens, "learned"
    tokens = learn_vocab(sentences, cfg.data.vocab_size)
    say(f"vocab: learned {len(tokens)} WordPiece tokens (target {cfg.data.vocab_size}) "
        f"in {time.perf_counter() - t:.1f}s")
    try:
        from tfbertperf.storage.atomic import write_atomic

        write_atomic(cache, vocab_text(tokens).encode())
    except OSError:  # a read-only cache directory costs the next run the learning, nothing else
        pass
    return tokens, "learned"


def learned_vocab_cache_path(sentences: list[str], vocab_size: int) -> str:
    """Where the vocab learned from `sentences` at `vocab_size` is kept: learning is deterministic (same text, size,
    learner settings and tensorflow-text version → same tokens) and takes ~10 s on the bundled text (a dozen
    learner passes), which every data set of another seq_len, shard count or seed would pay again.  Under the cache
    home ($TFBERTPERF_CACHE_HOME, else ~/.cache/tfbertperf), named by a sha256 of all of that."""
    from importlib.metadata import PackageNotFoundError, version

    from tfbertperf.config.schema import cache_home

    try:
        tf_text = version("tensorflow-text")
    except PackageNotFoundError:
        tf_text = "?"
    key = f"{LEARNER_SETTINGS}|sample {VOCAB_SAMPLE_BYTES}|{vocab_size}|tensorflow-text {tf_text}|"
    h = hashlib.sha256(key.encode())
    for s in sentences:
        h.update(s.encode())
        h.update(b"\n")
    return os.path.join(cache_home(), "learned-vocab", f"{h.hexdigest()[:32]}.txt")


def _cached_vocab(path: str) -> list[str] | None:
    try:
        with open(path, encoding="utf-8") as f:
            return parse_vocab(f.read(), path)
    except (OSError, UnicodeDecodeError, UsageError):  # absent or damaged: learn again (and rewrite it)
        return None
