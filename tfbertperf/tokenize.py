"""`tfbertperf tokenize --check` — does our in-graph tokenizer split text the way Hugging Face's does?

    tfbertperf tokenize --check                          # default data's vocab, default corpus
    tfbertperf tokenize --check --data DIR|gs://…|az://… # that data set's vocab.txt
    tfbertperf tokenize --check --corpus FILE [--limit N] [--json]

Tokenizes the same sentences with tensorflow-text's FastBertTokenizer (what `prepare` and
`pipeline.tokenize=inline` use) and with transformers' fast BERT tokenizer built from the same vocab.txt and the
same casing rule, and reports the identical share, the first differences side by side and their likely reason
(tfbertperf/data/tokcheck.py defines each).
"""

from __future__ import annotations

import json
import os

from tfbertperf.cliargs import Parser
from tfbertperf.errors import UsageError, cli_entry, process_main


def _vocab_tokens(data_uri: str | None) -> list[str]:
    """The vocab of a prepared data set (local or remote); the embedded default is prepared on first use."""
    from tfbertperf.config import load_config
    from tfbertperf.data.manifest import VOCAB_FILE
    from tfbertperf.data.vocab import parse_vocab
    from tfbertperf.job import ensure_data
    from tfbertperf.storage import open_backend

    cfg = load_config(data_uri=data_uri)
    backend = open_backend(cfg.resolved_data_uri(), cfg.data)
    uri, _ = ensure_data(cfg, backend, progress=True)
    vocab_uri = backend.join(uri, VOCAB_FILE)
    return parse_vocab(backend.read(vocab_uri).decode("utf-8"), vocab_uri)


@cli_entry
def main(argv=None) -> int:
    p = Parser(prog="tfbertperf tokenize", description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", required=True, help="compare ours with transformers' tokenizer")
    p.add_argument("--data", metavar="URI", help="prepared data whose vocab.txt to use (default: the embedded default)")
    p.add_argument("--corpus", metavar="FILE", help="text to tokenize, one sentence per line (default: pydoc topics)")
    p.add_argument("--limit", type=int, default=5000, help="sentences compared, evenly spaced (default 5000)")
    p.add_argument("--json", action="store_true", help="print the parity document as JSON")
    a = p.parse_args(argv)
    if a.limit < 1:
        raise UsageError(f"--limit {a.limit}: must be >= 1")
    if a.corpus and not os.path.isfile(a.corpus):
        raise UsageError(f"--corpus {a.corpus}: no such file")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from tfbertperf.data.tokcheck import check_parity, format_parity, texts_from_corpus

    tokens = _vocab_tokens(a.data)
    doc = check_parity(texts_from_corpus(a.corpus or None, a.limit), tokens, lower_case=True)
    print(json.dumps(doc, indent=2, ensure_ascii=False) if a.json else format_parity(doc))
    return 0


if __name__ == "__main__":
    process_main(main)
