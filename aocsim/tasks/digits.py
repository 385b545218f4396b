"""The 8x8 handwritten digits task (scikit-learn's copy, bundled, no download).

Split: stratified and fixed. For every class c, the indices of that class (in
file order) are permuted with `numpy.random.default_rng(SPLIT_SEED + c)` and
the first round(TEST_FRACTION * n_c) go to the test set. That gives 1,347
training and 450 test images; `split_fingerprint()` identifies the split in
model cards.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources

import numpy as np
import torch

SPLIT_SEED = 2024
TEST_FRACTION = 0.25
N_FEATURES = 64
N_CLASSES = 10


@dataclass(frozen=True)
class DigitsSplit:
    """Features scaled to [0, 1] (pixel / 16), labels 0..9."""

    x_train: torch.Tensor  # [1347, 64]
    y_train: torch.Tensor  # [1347] int64
    x_test: torch.Tensor  # [450, 64]
    y_test: torch.Tensor  # [450] int64


def load_raw() -> tuple[np.ndarray, np.ndarray]:
    """Return (images uint8 [1797, 8, 8] in 0..16, labels uint8 [1797])."""
    with resources.files("aocsim.tasks").joinpath("data/digits.npz").open("rb") as fh:
        data = np.load(fh)
        return data["images"], data["target"]


def test_indices() -> np.ndarray:
    """Sorted indices of the fixed test set (see the module docstring)."""
    _, labels = load_raw()
    picked = []
    for c in range(N_CLASSES):
        idx = np.flatnonzero(labels == c)
        perm = np.random.default_rng(SPLIT_SEED + c).permutation(idx)
        picked.append(perm[: int(round(TEST_FRACTION * idx.size))])
    return np.sort(np.concatenate(picked))


def split_fingerprint() -> str:
    """SHA-256 (first 16 hex digits) of the test indices: names the split in model cards."""
    return hashlib.sha256(test_indices().astype(np.int64).tobytes()).hexdigest()[:16]


def load_split(dtype: torch.dtype = torch.float64) -> DigitsSplit:
    """The fixed train/test split as tensors."""
    images, labels = load_raw()
    x = torch.as_tensor(images.reshape(len(images), -1) / 16.0, dtype=dtype)
    y = torch.as_tensor(labels.astype(np.int64))
    test = np.zeros(len(labels), dtype=bool)
    test[test_indices()] = True
    test_t = torch.as_tensor(test)
    return DigitsSplit(x[~test_t], y[~test_t], x[test_t], y[test_t])
