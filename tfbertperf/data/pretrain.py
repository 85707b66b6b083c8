"""Pretraining examples (MLM + NSP), exactly as google-research/bert `create_pretraining_data.py` makes them.

The control flow and the order of random draws follow the reference line by line (`create_training_instances`,
`create_instances_from_document`, `truncate_seq_pair`, `create_masked_lm_predictions` with
do_whole_word_mask=False), on token ids instead of token strings:

- documents are shuffled; for each of `dupe_factor` passes over the documents, sentences are packed into chunks
  of up to `target_seq_length` tokens (= seq_len − 3, or with probability `short_seq_prob` a random length in
  [2, seq_len − 3]); segment A = the first `a_end` sentences of a chunk; segment B is the rest of the chunk
  (actual next, label 0) or, with probability 0.5 (always for one-sentence chunks), sentences from a random
  other document (random next, label 1), the unused sentences being put back;
- the pair is truncated to seq_len − 3 tokens by removing one token at a time from the longer segment, at its
  front or back with probability 0.5 each;
- masking: num_to_predict = min(max_predictions, max(1, round(len(tokens) × masked_lm_prob))) positions out of
  the non-[CLS]/[SEP] tokens (len(tokens) counts [CLS]/[SEP], as in the reference); each chosen position
  becomes [MASK] with p=0.8, stays the same with p=0.1, becomes a uniformly random vocab id with p=0.1.

Besides the ids, each instance keeps the segment *texts* and token slices so `pipeline.tokenize=inline` can
rebuild the identical example from raw text (see features.py).
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass
class Sentence:
    ids: list[int]  # wordpiece ids (non-empty)
    text: str


@dataclass
class PretrainInstance:
    input_ids: list[int]  # unpadded, after masking: [CLS] A [SEP] B [SEP]
    segment_ids: list[int]
    masked_lm_positions: list[int]  # sorted
    masked_lm_ids: list[int]  # original ids at those positions (the labels)
    masked_lm_replace: list[int]  # id written at each position ([MASK], original, or random)
    is_random_next: bool
    text_a: str
    text_b: str
    a_range: tuple[int, int]  # token slice [start, stop) of tokenize(text_a) kept after truncation
    b_range: tuple[int, int]


def create_training_instances(
    documents: list[list[Sentence]],
    *,
    seq_len: int,
    dupe_factor: int,
    short_seq_prob: float,
    masked_lm_prob: float,
    max_predictions: int,
    vocab_size: int,
    cls_id: int,
    sep_id: int,
    mask_id: int,
    seed: int,
    progress=None,
    mask: bool = True,
) -> list[PretrainInstance]:
    """All instances for `documents` (lists of tokenized sentences; empty documents are dropped), shuffled.
    `progress(done_passes, dupe_factor)` is called after each dupe pass.  mask=False: no masking here (empty
    masked_lm_* lists, no random draws for it; prep/instances.py mask_batch masks whole chunks with numpy instead)."""
    rng = random.Random(seed)
    all_documents = [d for d in documents if d]
    rng.shuffle(all_documents)
    instances: list[PretrainInstance] = []
    for p in range(dupe_factor):
        for document_index in range(len(all_documents)):
            instances.extend(
                _instances_from_document(
                    all_documents, document_index, seq_len, short_seq_prob, masked_lm_prob, max_predictions,
                    vocab_size, cls_id, sep_id, mask_id, rng, mask,
                )
            )
        if progress:
            progress(p + 1, dupe_factor)
    rng.shuffle(instances)
    return instances


def _instances_from_document(
    all_documents, document_index, max_seq_length, short_seq_prob, masked_lm_prob, max_predictions,
    vocab_size, cls_id, sep_id, mask_id, rng, mask=True,
) -> list[PretrainInstance]:
    document = all_documents[document_index]
    max_num_tokens = max_seq_length - 3  # [CLS], [SEP], [SEP]
    target_seq_length = max_num_tokens
    # Mostly full-length sequences (efficient), sometimes short ones (less pretrain/fine-tune mismatch).
    if rng.random() < short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)

    instances = []
    current_chunk: list[Sentence] = []
    current_length = 0
    i = 0
    while i < len(document):
        segment = document[i]
        current_chunk.append(segment)
        current_length += len(segment.ids)
        if i == len(document) - 1 or current_length >= target_seq_length:
            if current_chunk:
                a_end = 1
                if len(current_chunk) >= 2:
                    a_end = rng.randint(1, len(current_chunk) - 1)
                seg_a = current_chunk[:a_end]
                tokens_a = [t for s in seg_a for t in s.ids]

                seg_b: list[Sentence] = []
                if len(current_chunk) == 1 or rng.random() < 0.5:
                    is_random_next = True
                    target_b_length = target_seq_length - len(tokens_a)
                    # Ten tries at a different document (one document only → the same one, as the reference).
                    for _ in range(10):
                        random_document_index = rng.randint(0, len(all_documents) - 1)
                        if random_document_index != document_index:
                            break
                    random_document = all_documents[random_document_index]
                    random_start = rng.randint(0, len(random_document) - 1)
                    b_len = 0
                    for j in range(random_start, len(random_document)):
                        seg_b.append(random_document[j])
                        b_len += len(random_document[j].ids)
                        if b_len >= target_b_length:
                            break
                    # Put the unused sentences back, so they are not wasted.
                    num_unused_segments = len(current_chunk) - a_end
                    i -= num_unused_segments
                else:
                    is_random_next = False
                    seg_b = current_chunk[a_end:]
                tokens_b = [t for s in seg_b for t in s.ids]

                a_lo, a_hi, b_lo, b_hi = _truncate_seq_pair(len(tokens_a), len(tokens_b), max_num_tokens, rng)
                assert a_hi - a_lo >= 1 and b_hi - b_lo >= 1
                kept_a, kept_b = tokens_a[a_lo:a_hi], tokens_b[b_lo:b_hi]
                tokens = [cls_id] + kept_a + [sep_id] + kept_b + [sep_id]
                segment_ids = [0] * (len(kept_a) + 2) + [1] * (len(kept_b) + 1)
                special = {0, len(kept_a) + 1, len(tokens) - 1}  # positions of [CLS] and the two [SEP]s
                output, positions, labels, replace = _create_masked_lm_predictions(
                    tokens, special, masked_lm_prob, max_predictions, vocab_size, mask_id, rng
                ) if mask else (tokens, [], [], [])
                instances.append(
                    PretrainInstance(
                        input_ids=output,
                        segment_ids=segment_ids,
                        masked_lm_positions=positions,
                        masked_lm_ids=labels,
                        masked_lm_replace=replace,
                        is_random_next=is_random_next,
                        text_a=" ".join(s.text for s in seg_a),
                        text_b=" ".join(s.text for s in seg_b),
                        a_range=(a_lo, a_hi),
                        b_range=(b_lo, b_hi),
                    )
                )
            current_chunk = []
            current_length = 0
        i += 1
    return instances


def _truncate_seq_pair(len_a: int, len_b: int, max_num_tokens: int, rng) -> tuple[int, int, int, int]:
    """The reference's truncate_seq_pair, returning the kept slices [a_lo, a_hi), [b_lo, b_hi) instead of
    deleting in place (same random draws)."""
    a_lo, a_hi, b_lo, b_hi = 0, len_a, 0, len_b
    while (a_hi - a_lo) + (b_hi - b_lo) > max_num_tokens:
        trunc_a = (a_hi - a_lo) > (b_hi - b_lo)
        # Truncate from the front or the back at random, to add more randomness and avoid biases.
        if rng.random() < 0.5:
            if trunc_a:
                a_lo += 1
            else:
                b_lo += 1
        else:
            if trunc_a:
                a_hi -= 1
            else:
                b_hi -= 1
    return a_lo, a_hi, b_lo, b_hi


def _create_masked_lm_predictions(tokens, special, masked_lm_prob, max_predictions, vocab_size, mask_id, rng):
    cand_indexes = [[i] for i in range(len(tokens)) if i not in special]
    rng.shuffle(cand_indexes)
    output_tokens = list(tokens)
    num_to_predict = min(max_predictions, max(1, int(round(len(tokens) * masked_lm_prob))))
    masked: list[tuple[int, int, int]] = []  # (position, original id, written id)
    covered = set()
    for index_set in cand_indexes:
        if len(masked) >= num_to_predict:
            break
        if len(masked) + len(index_set) > num_to_predict:
            continue
        if any(index in covered for index in index_set):
            continue
        for index in index_set:
            covered.add(index)
            if rng.random() < 0.8:  # 80%: [MASK]
                masked_token = mask_id
            elif rng.random() < 0.5:  # 10%: keep the original
                masked_token = tokens[index]
            else:  # 10%: a random word (any vocab id, reserved ones included, as the reference)
                masked_token = rng.randint(0, vocab_size - 1)
            output_tokens[index] = masked_token
            masked.append((index, tokens[index], masked_token))
    masked.sort()
    return (
        output_tokens,
        [m[0] for m in masked],
        [m[1] for m in masked],
        [m[2] for m in masked],
    )


def pad(values: list, length: int, fill=0) -> list:
    return list(values) + [fill] * (length - len(values))


def instance_features(inst: PretrainInstance, seq_len: int, max_predictions: int) -> dict:
    """google-research/bert `write_instance_to_example_files` features of one instance (padded)."""
    n = len(inst.input_ids)
    m = len(inst.masked_lm_positions)
    return {
        "input_ids": pad(inst.input_ids, seq_len),
        "input_mask": pad([1] * n, seq_len),
        "segment_ids": pad(inst.segment_ids, seq_len),
        "masked_lm_positions": pad(inst.masked_lm_positions, max_predictions),
        "masked_lm_ids": pad(inst.masked_lm_ids, max_predictions),
        "masked_lm_weights": pad([1.0] * m, max_predictions, 0.0),
        "next_sentence_labels": [1 if inst.is_random_next else 0],
    }


def instance_text_features(inst: PretrainInstance, max_predictions: int) -> dict:
    """Raw-text record of one instance (see features.py) — everything inline tokenization needs."""
    m = len(inst.masked_lm_positions)
    return {
        "text_a": inst.text_a.encode("utf-8"),
        "text_b": inst.text_b.encode("utf-8"),
        "a_range": list(inst.a_range),
        "b_range": list(inst.b_range),
        "masked_lm_positions": pad(inst.masked_lm_positions, max_predictions),
        "masked_lm_ids": pad(inst.masked_lm_ids, max_predictions),
        "masked_lm_weights": pad([1.0] * m, max_predictions, 0.0),
        "masked_lm_replace": pad(inst.masked_lm_replace, max_predictions),
        "next_sentence_labels": [1 if inst.is_random_next else 0],
    }
