"""Training data for the reference trainer: seeded synthetic tokens or a local text file.

Both sources are deterministic functions of (seed, step): every rank builds the same global
batch and keeps its own slice, so the data a step sees does not depend on the data-parallel
degree, and a restarted job replays the same batches.

* synthetic: a seeded Markov chain over the first 128 token ids (or the whole vocabulary if
  smaller). Each token is followed by a fixed successor with probability 0.9, else by a random
  token, so there is structure to learn and the loss visibly falls within tens of steps
  (uniform noise over the vocabulary would stay at ln(vocab)).
* PATH.txt: bytes of the file (a byte-level tokenizer: token = byte value, vocab 256), random
  windows of seq_len + 1 bytes.
"""
from __future__ import annotations

from pathlib import Path

import torch

FOLLOW_PROBABILITY = 0.9
SYNTHETIC_VOCAB = 128  # ids the synthetic chain uses: few enough to learn in a few steps
BYTE_VOCAB = 256


class SyntheticTokens:
    """Seeded Markov-chain token sequences."""

    def __init__(self, vocab_size: int, seq_len: int, seed: int):
        self.vocab_size = min(vocab_size, SYNTHETIC_VOCAB)
        self.seq_len, self.seed = seq_len, seed
        g = torch.Generator().manual_seed(seed)
        self.successor = torch.randperm(self.vocab_size, generator=g)

    def batch(self, step: int, num_sequences: int) -> torch.Tensor:
        """(num_sequences, seq_len + 1) int64 tokens of global step `step`."""
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        n, s = num_sequences, self.seq_len + 1
        noise = torch.randint(self.vocab_size, (n, s), generator=g)
        follow = torch.rand((n, s), generator=g) < FOLLOW_PROBABILITY
        tokens = torch.empty((n, s), dtype=torch.long)
        tokens[:, 0] = noise[:, 0]
        for t in range(1, s):  # sequential by nature; s is small for the reference trainer
            tokens[:, t] = torch.where(follow[:, t], self.successor[tokens[:, t - 1]], noise[:, t])
        return tokens


class ByteText:
    """A local text file as bytes; random windows per step."""

    def __init__(self, path: str | Path, seq_len: int, seed: int):
        data = Path(path).read_bytes()
        if len(data) < seq_len + 2:
            raise ValueError(f"data: {path} has {len(data)} bytes, need more than seq_len + 1 "
                             f"= {seq_len + 1}")
        self.tokens = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        self.seq_len, self.seed = seq_len, seed

    def batch(self, step: int, num_sequences: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        starts = torch.randint(len(self.tokens) - self.seq_len - 1, (num_sequences,), generator=g)
        windows = [self.tokens[i:i + self.seq_len + 1] for i in starts.tolist()]
        return torch.stack(windows).long()


def make_source(data: str, vocab_size: int, seq_len: int, seed: int) -> SyntheticTokens | ByteText:
    """`data` is "synthetic" or a path to a text file; ValueError names the field."""
    if data == "synthetic":
        return SyntheticTokens(vocab_size, seq_len, seed)
    path = Path(data)
    if not path.is_file():
        raise ValueError(f"data: {data!r} is neither 'synthetic' nor an existing text file")
    if vocab_size < BYTE_VOCAB:
        raise ValueError(f"data: byte-level text needs a vocabulary of at least {BYTE_VOCAB}, "
                         f"the model has {vocab_size}")
    return ByteText(path, seq_len, seed)


def rank_micro_batches(source: SyntheticTokens | ByteText, step: int, global_batch: int,
                       dp: int, dp_rank: int, micro_batch: int,
                       device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """This data-parallel rank's slice of the step's global batch, as (input_ids, labels) pairs."""
    tokens = source.batch(step, global_batch)
    per_rank = global_batch // dp
    mine = tokens[dp_rank * per_rank:(dp_rank + 1) * per_rank].to(device)
    return [(chunk[:, :-1], chunk[:, 1:]) for chunk in mine.split(micro_batch)]
