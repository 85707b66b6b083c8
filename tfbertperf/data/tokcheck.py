"""Tokenizer parity: our in-graph tokenizer (tensorflow-text FastBertTokenizer, as `prepare` and
`pipeline.tokenize=inline` build it) against Hugging Face's fast BERT tokenizer on the same vocab.

    doc = check_parity(texts_from_corpus("", 2000), "runs/…/vocab.txt", lower_case=True)
    print(format_parity(doc))

Definitions:
- a *sequence* is one input text; it is *identical* when both tokenizers give the same token-id list
  (no [CLS]/[SEP] added on either side).  identical_share = identical / sequences (0…1).
- each difference gets one likely *reason*, from the first differing token and the whitespace-delimited part of
  the text under it (the *snippet*), tested in this order:
    "control characters"   the snippet holds a control/format character or U+FFFD (HF deletes them; ours turns
                           them into a word break or [UNK])
    "special tokens in text"
                           the snippet spells a special token such as "[MASK]" (HF keeps it whole)
    "max-chars-per-word"   a word is over the per-word limit: ours counts UTF-8 bytes of the normalized word,
                           HF counts characters; both default to 100, so only non-ASCII words can differ
    "casing/accents"       the two normalizers give different text for the snippet: lower-casing vs Unicode case
                           folding (ß → ss), accent stripping, NFKC compatibility forms (… → ..., ﬁ → fi, full
                           width); the entry's "normalized" shows both
    "chinese characters"   the snippet holds CJK ideographs (both split them into single-character words; none
                           seen to differ so far)
    "[UNK]"                one side produced [UNK] where the other did not
    "other"                none of the above
TensorFlow and transformers are imported inside functions only.
"""

from __future__ import annotations

import importlib.metadata
import re
import unicodedata

from tfbertperf.data.vocab import RESERVED_TOKENS, load_vocab_file, make_tokenizer, vocab_sha256
from tfbertperf.errors import UsageError

# FastBertTokenizer's default max_bytes_per_word (make_tokenizer keeps it); HF's max_input_chars_per_word is set
# to the same number so that the limits agree for ASCII words.
MAX_WORD = 100
REASONS = ("control characters", "special tokens in text", "max-chars-per-word", "casing/accents",
           "chinese characters", "[UNK]", "other")
_CTRL_KEEP = "\t\n\r"  # whitespace to both libraries, not control characters


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _tokens(vocab) -> list[str]:
    """A vocab path (checked by load_vocab_file) or a token list (line i = id i)."""
    if isinstance(vocab, str):
        return load_vocab_file(vocab)
    return list(vocab)


def tokenizer_info(vocab_path: str | None, lower_case: bool = True, sha256: str | None = None) -> dict:
    """report.json's `tokenizer` block for our in-graph tokenizer: {"name","library","version","vocab_sha256",
    "lower_case"}; vocab_sha256 is the manifest's (sha256 of one token per line, trailing newline): given as
    `sha256`, or computed from `vocab_path`."""
    return {"name": "FastBertTokenizer", "library": "tensorflow-text", "version": _version("tensorflow-text"),
            "vocab_sha256": sha256 or vocab_sha256(_tokens(vocab_path)), "lower_case": bool(lower_case)}


def manifest_tokenizer(manifest: dict) -> dict:
    """The `tokenizer` block of a run on prepared data (its manifest's vocab and tokenizer)."""
    info = tokenizer_info(None, True, sha256=manifest.get("vocab_sha256"))
    if str(manifest.get("tokenizer", "")).startswith("none"):  # prepare --synthetic: random ids, no tokenizer
        info.update(name="none (synthetic random ids)", library=None, version=None, lower_case=None)
    info["vocab_size"] = manifest.get("vocab_size")
    return info


def build_hf_tokenizer(vocab_path_or_list, lower_case: bool, max_chars_per_word: int = MAX_WORD):
    """A transformers fast BERT tokenizer (in transformers 5 `BertTokenizer` is the `tokenizers`-backed one and
    `BertTokenizerFast` its alias) on our vocab: lower_case=True → lower-case + NFD + strip accents, as uncased
    BERT; False → neither.  Raises UsageError if its vocab is not ours id for id."""
    from transformers import BertTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_default_handler()  # its records go to Python logging (errors.py: not our stderr)
    hf_logging.enable_propagation()
    tokens = _tokens(vocab_path_or_list)
    # vocab= takes a dict (or path); vocab_file= is silently ignored in transformers 5 (a 5-token vocab results).
    tok = BertTokenizer(vocab={t: i for i, t in enumerate(tokens)}, do_lower_case=bool(lower_case),
                        strip_accents=None, tokenize_chinese_chars=True)
    tok.backend_tokenizer.model.max_input_chars_per_word = int(max_chars_per_word)
    got = tok.get_vocab()
    bad = next((t for i, t in enumerate(tokens) if got.get(t) != i), None)
    if len(got) != len(tokens) or bad is not None:
        raise UsageError(f"transformers tokenizer: vocab has {len(got)} tokens, ours {len(tokens)}"
                         + (f" (token {bad!r} has id {got.get(bad)})" if bad is not None else ""))
    return tok


def _our_tokenizer(tokens: list[str], lower_case: bool):
    if lower_case:
        return make_tokenizer(tokens)  # exactly what prepare and tokenize=inline use
    import tensorflow as tf
    import tensorflow_text as tft

    # make_tokenizer's arguments with the casing rule off (a cased vocab).
    return tft.FastBertTokenizer(vocab=list(tokens), suffix_indicator="##", token_out_type=tf.int64,
                                 unknown_token="[UNK]", lower_case_nfd_strip_accents=False)


def _ours_with_offsets(tok, texts: list[str], batch: int = 4096):
    """Token ids and (start, end) character offsets per text (tensorflow-text gives byte offsets)."""
    import tensorflow as tf

    ids_out, spans_out = [], []
    for i in range(0, len(texts), batch):
        chunk = texts[i : i + batch]
        ids, starts, ends = tok.tokenize_with_offsets(tf.constant(chunk, dtype=tf.string))
        for text, ii, ss, ee in zip(chunk, ids.to_list(), starts.to_list(), ends.to_list()):
            char_at = {}  # byte offset → character index
            b = 0
            for c, ch in enumerate(text):
                char_at[b] = c
                b += len(ch.encode("utf-8"))
            char_at[b] = len(text)
            ids_out.append(ii)
            spans_out.append([(char_at.get(s, 0), char_at.get(e, len(text))) for s, e in zip(ss, ee)])
    return ids_out, spans_out


def _is_control(ch: str) -> bool:
    return ch == "\ufffd" or (ch not in _CTRL_KEEP and unicodedata.category(ch) in ("Cc", "Cf"))


def _is_cjk(ch: str) -> bool:
    # The CJK ideograph blocks of BERT's _is_chinese_char (both libraries use these ranges).
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF),
                                             (0x2A700, 0x2B73F), (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF),
                                             (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)))


def _words(s: str) -> list[str]:
    """Whitespace- and punctuation-split words, as BERT's pre-tokenizer splits them."""
    return [w for w in re.split(r"[\W_]+", s) if w]


def _snippet(text: str, spans_a, spans_b, i: int) -> str:
    """The whitespace-delimited part of `text` under token i of either side (the first difference)."""
    pts = [p for spans in (spans_a, spans_b) for p in (spans[i:i + 1] or spans[-1:])]
    lo = min((s for s, _ in pts), default=0)
    hi = max((e for _, e in pts), default=len(text))
    while lo > 0 and not text[lo - 1].isspace():
        lo -= 1
    while hi < len(text) and not text[hi].isspace():
        hi += 1
    return text[lo:hi]


def _reason(snip: str, ours_norm: str, hf_norm: str, ours_tok: list[str], hf_tok: list[str], i: int) -> str:
    if any(_is_control(c) for c in snip):
        return "control characters"
    if any(t in snip for t in RESERVED_TOKENS):
        return "special tokens in text"
    if any(len(w.encode("utf-8")) > MAX_WORD for w in _words(ours_norm)) or any(
            len(w) > MAX_WORD for w in _words(hf_norm)):
        return "max-chars-per-word"
    if "".join(ours_norm.split()) != "".join(hf_norm.split()):
        return "casing/accents"
    if any(_is_cjk(c) for c in snip):
        return "chinese characters"
    a = ours_tok[i] if i < len(ours_tok) else None
    b = hf_tok[i] if i < len(hf_tok) else None
    if (a == "[UNK]") != (b == "[UNK]"):
        return "[UNK]"
    return "other"


def check_parity(texts: list[str], vocab, lower_case: bool = True, hf_lower_case: bool | None = None,
                 max_examples_shown: int = 5) -> dict:
    """Tokenize every text with ours and with HF (same vocab) and compare the token-id lists.

    vocab: a vocab.txt path or a token list; lower_case: our casing rule (make_tokenizer's is True);
    hf_lower_case: HF's (None = the same).  Returns {"sequences", "identical", "identical_share", "differences"
    (the first `max_examples_shown`: text, ours/hf token strings, first_diff (token index), snippet,
    normalized {ours, hf}, reason), "reasons" {reason: count over all differences}, "ours", "hf",
    "vocab_size", "vocab_sha256", "max_word" (the per-word limits)}."""
    import tensorflow as tf
    import tensorflow_text as tft

    tokens = _tokens(vocab)
    texts = [str(t) for t in texts]
    hf_lower = bool(lower_case if hf_lower_case is None else hf_lower_case)
    hf = build_hf_tokenizer(tokens, hf_lower)
    ours_ids, ours_spans = _ours_with_offsets(_our_tokenizer(tokens, lower_case), texts)
    enc = hf(texts, add_special_tokens=False, return_offsets_mapping=True) if texts else {
        "input_ids": [], "offset_mapping": []}
    hf_ids, hf_spans = enc["input_ids"], enc["offset_mapping"]

    diff = [k for k in range(len(texts)) if list(ours_ids[k]) != list(hf_ids[k])]
    first, snippets = {}, []
    for k in diff:
        a, b = ours_ids[k], hf_ids[k]
        i = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
        first[k] = i
        snippets.append(_snippet(texts[k], ours_spans[k], hf_spans[k], i))
    # Both normalizers on every snippet, batched: which text each library really tokenizes.
    ours_norm = [s.decode("utf-8", "replace") for s in tft.FastBertNormalizer(
        lower_case_nfd_strip_accents=bool(lower_case)).normalize(tf.constant(snippets, tf.string)).numpy()
    ] if snippets else []
    hf_norm = [hf.backend_tokenizer.normalizer.normalize_str(s) for s in snippets]

    reasons: dict[str, int] = {}
    shown = []
    for n, k in enumerate(diff):
        ours_tok = [tokens[t] for t in ours_ids[k]]
        hf_tok = [tokens[t] for t in hf_ids[k]]
        r = _reason(snippets[n], ours_norm[n], hf_norm[n], ours_tok, hf_tok, first[k])
        reasons[r] = reasons.get(r, 0) + 1
        if len(shown) < max_examples_shown:
            shown.append({"text": texts[k], "ours": ours_tok, "hf": hf_tok, "first_diff": first[k],
                          "snippet": snippets[n], "normalized": {"ours": ours_norm[n], "hf": hf_norm[n]},
                          "reason": r})
    n_all = len(texts)
    return {
        "sequences": n_all, "identical": n_all - len(diff),
        "identical_share": (n_all - len(diff)) / n_all if n_all else 1.0,
        "differences": shown, "reasons": dict(sorted(reasons.items(), key=lambda kv: -kv[1])),
        "ours": {"library": "tensorflow-text", "version": _version("tensorflow-text"),
                 "tokenizer": "FastBertTokenizer", "lower_case": bool(lower_case)},
        "hf": {"library": "transformers", "version": _version("transformers"),
               "tokenizer": type(hf).__name__ + " (fast)", "lower_case": hf_lower},
        "vocab_size": len(tokens), "vocab_sha256": vocab_sha256(tokens),
        "max_word": {"ours_bytes": MAX_WORD, "hf_chars": MAX_WORD},
    }


def texts_from_corpus(path: str | None = None, limit: int | None = None) -> list[str]:
    """Sentences to check: `path` "" / None = the default corpus (pydoc topics, split as prepare splits it);
    else text files in the google-research/bert format (one sentence per line; comma-separated paths).
    `limit` keeps that many, evenly spaced over the corpus (deterministic), so every topic is represented."""
    from tfbertperf.data.corpus import load_corpus

    sentences = load_corpus(path or "").all_sentences()
    if limit is not None and 0 < limit < len(sentences):
        step = len(sentences) / limit
        sentences = [sentences[int(j * step)] for j in range(limit)]
    return sentences


def _short(s: str, n: int = 40) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


def _window(toks: list[str], i: int, before: int = 3, after: int = 6) -> str:
    lo = max(0, i - before)
    return ("… " if lo else "") + " ".join(toks[lo : i + after]) + (" …" if i + after < len(toks) else "")


def format_parity(doc: dict) -> str:
    """Human-readable summary: share, both sides' library/casing, reasons, and for each shown difference the
    snippet, both normalizations and the two token streams around the first differing token."""
    o, h = doc["ours"], doc["hf"]
    lines = [
        f"tokenizer parity: {doc['identical']} of {doc['sequences']} sequences identical "
        f"({100 * doc['identical_share']:.2f}%)",
        f"  ours: {o['library']} {o['version']} {o.get('tokenizer', '')}, lower_case={o['lower_case']}",
        f"  hf:   {h['library']} {h['version']} {h.get('tokenizer', '')}, lower_case={h['lower_case']}",
        f"  vocab: {doc.get('vocab_size', '?')} tokens, sha256 {doc['vocab_sha256'][:16]}…",
    ]
    if doc["reasons"]:
        lines.append("reasons: " + ", ".join(f"{r} {n}" for r, n in doc["reasons"].items()))
    for n, d in enumerate(doc["differences"], 1):
        text = _short(d["text"], 100)
        i = d.get("first_diff", 0)
        norm = d.get("normalized", {})
        lines += [f"{n}. [{d['reason']}] {text!r}",
                  f"   at {_short(d.get('snippet', ''))!r}: ours normalizes to {_short(norm.get('ours', ''))!r}, "
                  f"hf to {_short(norm.get('hf', ''))!r}" if norm else "",
                  f"   ours: {_window(d['ours'], i)}", f"   hf:   {_window(d['hf'], i)}"]
    return "\n".join(line for line in lines if line)
