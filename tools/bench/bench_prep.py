"""Corpus-scale data preparation, side by side in one run: our two routes to a data set — `tfbertperf prepare
--corpus FILE` and `--set data.corpus=FILE` (what a run does: job.ensure_data preparing the run's data
directory) — vs google-research/bert's create_pretraining_data.py (the unmodified script in
../shared/anchors/google-research-bert/, run under TF 2 by its run_tf2.py), on the same corpus, vocab, seq_len,
max_predictions, masked_lm_prob, short_seq_prob and dupe_factor.  Reported: examples written, wall seconds
(process start to exit, TF import included on every side), examples/s, peak RSS (largest single process, and
the whole process tree summed, sampled every 0.1 s), the ratio of examples/s to the reference's, and whether
our two routes wrote the same manifest fields and the same bytes.

    python tools/bench/bench_prep.py --mb 5 --text-shards          # all three on 5 MB, our default output
    python tools/bench/bench_prep.py --mb 50 --anchor-mb 10        # the reference on the first 10 MB only

The data.corpus route always writes raw-text shards (a run's data set serves pipeline.tokenize=inline too), so
it is measured only with --text-shards (without it, the table has the --corpus row alone).

The corpus: Python's pydoc topics split into documents as `prepare` splits them, the documents shuffled and
repeated until the size is reached (one sentence per line, a blank line between documents).  The vocab: the
WordPiece vocab learned from the default corpus (data.vocab_size) unless --vocab is given.  The reference is
single-process and keeps the whole corpus and every instance in memory; rates are per example, so a smaller
slice for it (--anchor-mb) is a like-for-like rate when its run on the full corpus would take too long.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ANCHOR = ROOT.parent / "shared" / "anchors" / "google-research-bert" / "run_tf2.py"
sys.path.insert(0, str(ROOT))


def make_corpus(path: Path, mb: float, seed: int = 0) -> int:
    from tfbertperf.data.corpus import load_default_corpus

    docs = [d.sentences for d in load_default_corpus().documents]
    target, n, rng = int(mb * 1e6), 0, random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        while n < target:
            order = list(range(len(docs)))
            rng.shuffle(order)
            for i in order:
                text = "\n".join(docs[i]) + "\n\n"
                f.write(text)
                n += len(text.encode("utf-8"))
                if n >= target:
                    break
    return n


def count_records(path: Path) -> int:
    """TFRecord records in a file (framing only: uint64 length, 4-byte CRC, data, 4-byte CRC)."""
    n = 0
    with open(path, "rb") as f:
        while head := f.read(12):
            f.seek(int.from_bytes(head[:8], "little") + 4, 1)
            n += 1
    return n


def timed(cmd: list[str], log: Path, **env_extra) -> dict:
    """Run `cmd`; wall seconds and peak RSS (largest process, and the process tree summed) in MB."""
    import psutil

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(ROOT), **env_extra)
    t0 = time.perf_counter()
    with open(log, "w") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        proc, peak_one, peak_tree = psutil.Process(p.pid), 0, 0
        while p.poll() is None:
            try:
                rss = [x.memory_info().rss for x in [proc, *proc.children(recursive=True)]]
            except psutil.Error:
                rss = [0]
            peak_one, peak_tree = max(peak_one, max(rss)), max(peak_tree, sum(rss))
            time.sleep(0.1)
    secs = time.perf_counter() - t0
    if p.returncode:
        sys.exit(f"bench_prep: {' '.join(cmd[:4])} … failed ({p.returncode}); see {log}")
    return {"seconds": secs, "rss_mb": peak_one / 2**20, "rss_tree_mb": peak_tree / 2**20}


def ensure_data_main(sets: list[str]) -> None:
    """The data.corpus route in its own process: job.ensure_data for the config `sets`, as `run` calls it
    (the data directory under $TFBERTPERF_DATA_HOME)."""
    from tfbertperf.config import load_config
    from tfbertperf.job import ensure_data
    from tfbertperf.storage import open_backend

    cfg = load_config(sets=sets)
    uri, _ = ensure_data(cfg, open_backend(cfg.resolved_data_uri(), cfg.data))
    print(uri)


def same_output(a: Path, b: Path) -> tuple[bool, bool]:
    """(same manifest fields, every file byte-identical) of two prepared directories."""
    ma, mb = (json.loads((d / "manifest.json").read_text()) for d in (a, b))
    files = sorted(p.name for p in a.iterdir())
    same_bytes = files == sorted(p.name for p in b.iterdir()) and all(
        (a / f).read_bytes() == (b / f).read_bytes() for f in files)
    return sorted(ma) == sorted(mb), same_bytes


def main() -> None:
    if sys.argv[1:2] == ["--ensure-data"]:
        return ensure_data_main(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=50.0, help="corpus size for tfbertperf prepare (MB)")
    ap.add_argument("--anchor-mb", type=float, help="corpus size for the reference (default: --mb)")
    ap.add_argument("--dupe", type=int, default=2)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--max-pred", type=int, default=20)
    ap.add_argument("--workers", type=int, help="prepare --workers (default: usable cores)")
    ap.add_argument("--vocab", help="vocab.txt (default: learned from the default corpus)")
    ap.add_argument("--work", help="working directory (default: a temporary one, removed)")
    ap.add_argument("--text-shards", action="store_true",
                    help="ours also writes raw-text shards (the reference writes none; default: like for like)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    work = Path(a.work or tempfile.mkdtemp(prefix="bench-prep-"))
    work.mkdir(parents=True, exist_ok=True)
    corpus, anchor_corpus = work / "corpus.txt", work / "corpus-anchor.txt"
    size = make_corpus(corpus, a.mb)
    anchor_size = make_corpus(anchor_corpus, a.anchor_mb) if a.anchor_mb else size
    anchor_corpus = anchor_corpus if a.anchor_mb else corpus
    vocab = a.vocab
    if not vocab:
        from tfbertperf.data.corpus import load_default_corpus
        from tfbertperf.data.vocab import learn_vocab, vocab_text

        vocab = str(work / "vocab.txt")
        Path(vocab).write_text(vocab_text(learn_vocab(load_default_corpus().all_sentences(), 8000)))
    common = dict(seq=a.seq, pred=a.max_pred, prob=0.15, short=0.1, dupe=a.dupe, seed=12345,
                  text_shards=a.text_shards)
    ours_cmd = [sys.executable, "-m", "tfbertperf.prepare", "--corpus", str(corpus), "--out", str(work / "ours"),
                "--set", f"data.vocab={vocab}", "--set", f"data.seq_len={a.seq}",
                "--set", f"data.max_predictions={a.max_pred}", "--set", "data.masked_lm_prob=0.15",
                "--set", "data.short_seq_prob=0.1", "--set", f"data.dupe_factor={a.dupe}",
                "--set", "data.seed=12345"] + (["--workers", str(a.workers)] if a.workers else []) + (
                    [] if a.text_shards else ["--no-text-shards"])
    ref_cmd = [sys.executable, str(ANCHOR), f"--input_file={anchor_corpus}", f"--output_file={work / 'ref.tfrecord'}",
               f"--vocab_file={vocab}", "--do_lower_case=True", f"--max_seq_length={a.seq}",
               f"--max_predictions_per_seq={a.max_pred}", "--masked_lm_prob=0.15", "--short_seq_prob=0.1",
               "--random_seed=12345", f"--dupe_factor={a.dupe}"]
    home = work / "data-home"
    config_cmd = [sys.executable, str(Path(__file__).resolve()), "--ensure-data", f"data.corpus={corpus}",
                  *[x for x in ours_cmd if x.startswith("data.")]]
    rows = {}
    ours = rows["prepare --corpus"] = timed(ours_cmd, work / "ours.log")
    ours["examples"] = json.loads((work / "ours" / "manifest.json").read_text())["num_examples"]
    ours["corpus_mb"] = size / 1e6
    if a.text_shards:  # the data.corpus route writes raw-text shards: comparable with --text-shards only
        cfg_row = rows["--set data.corpus (run)"] = timed(config_cmd, work / "config.log", TFBERTPERF_DATA_HOME=str(home))
        cfg_dir = Path((work / "config.log").read_text().strip().splitlines()[-1])
        cfg_row["examples"] = json.loads((cfg_dir / "manifest.json").read_text())["num_examples"]
        cfg_row["corpus_mb"] = size / 1e6
        cfg_row["same_manifest_fields"], cfg_row["same_bytes"] = same_output(work / "ours", cfg_dir)
    ref = rows["create_pretraining_data.py"] = timed(ref_cmd, work / "ref.log")
    ref["examples"] = count_records(work / "ref.tfrecord")
    ref["corpus_mb"] = anchor_size / 1e6
    for r in rows.values():
        r["examples_per_sec"] = r["examples"] / r["seconds"]
    for r in rows.values():
        r["ratio_examples_per_sec"] = r["examples_per_sec"] / ref["examples_per_sec"]
    doc = {"settings": common, "workers": a.workers or "default", "rows": rows, "ours_cmd": " ".join(ours_cmd),
           "config_cmd": " ".join(config_cmd) if a.text_shards else None, "reference_cmd": " ".join(ref_cmd)}
    if a.json:
        print(json.dumps(doc, indent=2))
        return
    print(f"settings: seq_len {a.seq}, max_predictions {a.max_pred}, masked_lm_prob 0.15, short_seq_prob 0.1, "
          f"dupe_factor {a.dupe}, vocab {vocab}, ours {'with' if a.text_shards else 'without'} raw-text shards")
    print(f"{'':28}{'corpus MB':>10}{'examples':>10}{'wall s':>9}{'examples/s':>12}{'peak RSS MB':>13}"
          f"{'tree RSS MB':>13}{'ratio':>8}")
    for name, r in rows.items():
        print(f"{name:28}{r['corpus_mb']:10.1f}{r['examples']:10d}{r['seconds']:9.1f}{r['examples_per_sec']:12.0f}"
              f"{r['rss_mb']:13.0f}{r['rss_tree_mb']:13.0f}{r['ratio_examples_per_sec']:7.2f}x")
    if a.text_shards:
        print(f"--corpus vs data.corpus: same manifest fields {cfg_row['same_manifest_fields']}, "
              f"same bytes {cfg_row['same_bytes']}")


if __name__ == "__main__":
    main()
