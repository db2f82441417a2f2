"""A benchmark workload: lines of text tokenized with a real BPE tokenizer (Hugging Face `tokenizers`), padded and
truncated to a fixed length, returned as tensors.

    --dataset benchmarks/workloads/text_tokens.py:text [--dataset-arg lines=20000] [--dataset-arg length=256]
                                                       [--dataset-arg cache=DIR]

On first use it writes a corpus of `lines` lines (50-500 words each, drawn Zipf-like from a made-up vocabulary of
word-like strings, so the BPE merges are real work) and trains a byte-level-free BPE tokenizer on it with
tokenizers' own trainer (vocabulary 8000, [CLS] … [SEP] template): nothing is downloaded. Both are kept in the
bench cache (bench_cache.py). Each sample is one line encoded: `input_ids` and `attention_mask`, int64 tensors of
`length`. Needs the `bench` extra (tokenizers); loadertop itself never imports it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import bench_cache

VOCAB = 8000
SPECIALS = ["[UNK]", "[PAD]", "[CLS]", "[SEP]"]
TRAIN_LINES = 4000  # the tokenizer learns its merges from these; the rest are only read
# Encoding one line at a time never uses tokenizers' thread pool; saying so keeps forked workers from warning.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def make_corpus(folder: Path, lines: int, seed: int) -> None:
    """corpus.txt (`lines` lines) and tokenizer.json (BPE trained on the first TRAIN_LINES) into `folder`."""
    import numpy as np

    rng = np.random.default_rng(seed)
    syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]
    words = ["".join(rng.choice(syllables, size=int(rng.integers(1, 5)))) for _ in range(20000)]
    weights = 1.0 / np.arange(1, len(words) + 1)  # Zipf: a few words common, most rare, as in prose
    weights /= weights.sum()
    with open(folder / "corpus.txt", "w") as out:
        for _ in range(lines):
            picks = rng.choice(len(words), size=int(rng.integers(50, 501)), p=weights)
            out.write(" ".join(words[i] for i in picks) + ".\n")
    train_tokenizer(folder / "corpus.txt", folder / "tokenizer.json")


def train_tokenizer(corpus: Path, target: Path) -> None:
    from itertools import islice

    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS, show_progress=False)
    with open(corpus) as lines:
        tokenizer.train_from_iterator(islice(lines, TRAIN_LINES), trainer=trainer)
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    tokenizer.save(str(target))


class TokenizedLines:
    """Map-style: line i, encoded, padded or truncated to `length`: {"input_ids", "attention_mask"} int64 tensors."""

    def __init__(self, folder: Path, length: int) -> None:
        from tokenizers import Tokenizer

        self.lines = (folder / "corpus.txt").read_text().splitlines()
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=length)
        self.tokenizer.enable_padding(pad_id=self.tokenizer.token_to_id("[PAD]"), pad_token="[PAD]", length=length)

    def __len__(self) -> int:
        return len(self.lines)

    def __getitem__(self, index: int) -> dict[str, Any]:
        import torch

        encoding = self.tokenizer.encode(self.lines[index])
        return {
            "input_ids": torch.tensor(encoding.ids, dtype=torch.int64),
            "attention_mask": torch.tensor(encoding.attention_mask, dtype=torch.int64),
        }


def text(lines: str = "20000", length: str = "256", cache: str = "", seed: str = "0") -> Any:
    """The dataset factory: the generated corpus, tokenized line by line with the locally trained tokenizer."""
    count, size, seed_ = bench_cache.positive("lines", lines), bench_cache.positive("length", length), int(seed)
    folder = bench_cache.cache_root(cache) / f"text-bpe-{count}-s{seed_}"
    bench_cache.ensure(folder, lambda tmp: make_corpus(tmp, count, seed_))
    return TokenizedLines(folder, size)
