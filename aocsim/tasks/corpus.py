"""A character-level corpus for language modelling: the English help text of CPython's `pydoc_data.topics`.

Text: the values of `pydoc_data.topics.topics` (the help topics `help("assert")` prints; 79 topics and
464,970 characters in CPython 3.11.7) concatenated in sorted key order. The module ships with every
CPython, so nothing is downloaded; its text changes between Python releases, so model cards record the
text's SHA-256, length and the Python version (`Corpus.fingerprint`).

Split (fixed): the first 90 % of the characters (`HELDOUT_FRACTION`, the split index rounded down) are
the training split, the last 10 % the held-out split (in 3.11.7: characters 418,473 to 464,969, from
inside the topic "typesmapping" through "typesmethods" .. "with", "yield"). Training windows lie inside
the training split with their targets, so no held-out character is ever a training input or target.

Vocabulary (`Vocabulary`): the characters that occur at least `MIN_COUNT` = 3 times in the training
split, in code-point order, token id i for the i-th character; id `unknown_id` = len(vocabulary) stands
for every other character (decoded as U+FFFD). The model has len(vocabulary) + 1 classes.

Next-character pairs (`next_character_pairs`): a window of L + 1 consecutive characters c_0 .. c_L
gives the inputs c_0 .. c_{L-1} and the targets c_1 .. c_L: position t predicts character t + 1.
"""

from __future__ import annotations

import hashlib
import platform
from collections import Counter
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

import numpy as np
import torch

from aocsim._checks import short
from aocsim.errors import InputError

HELDOUT_FRACTION = 0.1
MIN_COUNT = 3
UNKNOWN_CHAR = "\ufffd"
SOURCE = "pydoc_data.topics.topics (CPython), values in sorted key order"
SPLIT = "first 90 % of the characters for training, last 10 % held out (by position)"


@dataclass(frozen=True)
class Vocabulary:
    """Characters <-> token ids: id i is `chars[i]`; `unknown_id` = len(chars) is every other character."""

    chars: str

    def __post_init__(self) -> None:
        if not isinstance(self.chars, str) or not self.chars or len(set(self.chars)) != len(self.chars):
            raise InputError(f"vocabulary = {short(self.chars)}; expected a non-empty string of distinct characters")

    @classmethod
    def from_text(cls, text: str, min_count: int = MIN_COUNT) -> Vocabulary:
        """The characters occurring at least `min_count` times in `text`, in code-point order."""
        counts = Counter(text)
        return cls("".join(sorted(c for c, n in counts.items() if n >= min_count)))

    @property
    def unknown_id(self) -> int:
        return len(self.chars)

    @property
    def size(self) -> int:
        """Number of token ids (the characters and the unknown id)."""
        return len(self.chars) + 1

    @cached_property
    def _index(self) -> dict[str, int]:
        return {c: i for i, c in enumerate(self.chars)}

    def unknown_characters(self, text: str) -> list[str]:
        """The distinct characters of `text` outside the vocabulary, in order of first appearance."""
        return list(dict.fromkeys(c for c in self._check_text(text) if c not in self._index))

    def encode(self, text: str, *, strict: bool = False) -> np.ndarray:
        """Token ids (int64 [len(text)]) of `text`; a character outside the vocabulary gives `unknown_id`,
        or with `strict` an InputError naming it."""
        index, unknown = self._index, self.unknown_id
        if strict and (bad := self.unknown_characters(text)):
            raise InputError(f"character {bad[0]!r} (U+{ord(bad[0]):04X}) is not in the vocabulary of "
                             f"{len(self.chars)} characters")
        return np.fromiter((index.get(c, unknown) for c in self._check_text(text)), dtype=np.int64, count=len(text))

    def decode(self, ids: Any) -> str:
        """The text of token ids (a sequence, numpy array or tensor of integers); `unknown_id` -> U+FFFD."""
        flat = np.asarray(ids.detach().cpu() if isinstance(ids, torch.Tensor) else ids).reshape(-1)
        if flat.size and not np.issubdtype(flat.dtype, np.integer):
            raise InputError(f"token ids of dtype {flat.dtype}; expected integers")
        table = self.chars + UNKNOWN_CHAR
        bad = [int(i) for i in flat if not 0 <= int(i) < len(table)]
        if bad:
            raise InputError(f"token id {bad[0]} is outside the vocabulary [0, {self.unknown_id}]")
        return "".join(table[int(i)] for i in flat)

    @staticmethod
    def _check_text(text: Any) -> str:
        if not isinstance(text, str):
            raise InputError(f"text = {short(text)}; expected a string")
        return text


def next_character_pairs(windows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) of windows [B, L + 1] of consecutive token ids: inputs [B, L] are the first L
    characters, targets [B, L] the next character of each position (position t predicts t + 1)."""
    return windows[:, :-1], windows[:, 1:]


@dataclass(frozen=True)
class Corpus:
    """A text, its fixed split at character `split` (training before it, held out from it on) and the
    vocabulary of its training split."""

    text: str
    split: int
    vocabulary: Vocabulary
    source: str = ""

    @cached_property
    def train_ids(self) -> np.ndarray:
        return self.vocabulary.encode(self.text[: self.split])

    def fingerprint(self) -> dict[str, Any]:
        """What identifies the text (recorded in model cards): SHA-256 of its UTF-8, length, Python version."""
        return {"source": self.source, "sha256": hashlib.sha256(self.text.encode()).hexdigest(),
                "characters": len(self.text), "python": platform.python_version()}

    def sample(self, rng: np.random.Generator, batch: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """`batch` random windows of the training split: (inputs, targets), int64 [batch, length] each.

        Each window's first character is uniform over the starts whose L + 1 characters lie in the
        training split (numpy `rng.integers`; the same generator state, the same windows).
        """
        n = self.split - length  # starts 0 .. split - length - 1: the last target is character split - 1
        if not (isinstance(batch, int) and batch >= 1 and isinstance(length, int) and 1 <= length and n >= 1):
            raise InputError(f"batch = {batch!r}, length = {length!r}; expected integers >= 1 with length < "
                             f"{self.split} (the training split's characters)")
        starts = rng.integers(0, n, size=batch)
        windows = self.train_ids[starts[:, None] + np.arange(length + 1)]
        return next_character_pairs(torch.from_numpy(windows))

    def heldout_windows(self, length: int, vocabulary: Vocabulary | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The held-out split as consecutive windows of `length` positions: (inputs, targets) [W, length].

        Window w holds characters w L .. w L + L of the held-out text (each window's last target is the
        next window's first input), W = (characters - 1) // L; every held-out character but the first
        is a target once. Encoded with `vocabulary` (a model's) or the corpus's own.
        """
        ids = (vocabulary or self.vocabulary).encode(self.text[self.split:])
        count = (len(ids) - 1) // length if isinstance(length, int) and length >= 1 else 0
        if count < 1:
            raise InputError(f"length = {length!r}; expected an integer in [1, {len(ids) - 1}] (the held-out "
                             "split's characters minus one)")
        starts = np.arange(count) * length
        return next_character_pairs(torch.from_numpy(ids[starts[:, None] + np.arange(length + 1)]))


def make_corpus(text: str, *, heldout_fraction: float = HELDOUT_FRACTION, min_count: int = MIN_COUNT,
                source: str = "") -> Corpus:
    """The corpus of `text`: split at int((1 - heldout_fraction) len(text)), vocabulary of the training part."""
    if not isinstance(text, str) or len(text) < 4:
        raise InputError(f"text = {short(text)}; expected a string of at least 4 characters")
    if not 0 < heldout_fraction < 1:
        raise InputError(f"heldout_fraction = {heldout_fraction!r}; expected a fraction in (0, 1)")
    split = int((1 - heldout_fraction) * len(text))
    return Corpus(text, split, Vocabulary.from_text(text[:split], min_count), source)


def pydoc_text() -> str:
    """The English text of `pydoc_data.topics` (module docstring)."""
    try:
        from pydoc_data.topics import topics
    except ImportError as exc:  # some distributions package pydoc_data separately
        raise InputError(f"pydoc_data.topics is not available in this Python ({exc}); the language corpus "
                         "needs CPython's standard library with pydoc_data") from None
    return "".join(topics[key] for key in sorted(topics))


@lru_cache(maxsize=1)
def pydoc_corpus() -> Corpus:
    """The language corpus of the `charlm-*` recipes (module docstring)."""
    return make_corpus(pydoc_text(), source=SOURCE)
