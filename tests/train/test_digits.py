"""The bundled digits data and its fixed split."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from aocsim.tasks import digits


def test_bundled_copy_equals_scikit_learn() -> None:
    datasets = pytest.importorskip("sklearn.datasets")
    ref = datasets.load_digits()
    images, labels = digits.load_raw()
    np.testing.assert_array_equal(images, ref.images.astype(np.uint8))
    np.testing.assert_array_equal(labels, ref.target)


def test_split_is_fixed_stratified_and_disjoint() -> None:
    split = digits.load_split()
    assert len(split.y_train) == 1347 and len(split.y_test) == 450
    test_counts = torch.bincount(split.y_test, minlength=10).double()
    all_counts = test_counts + torch.bincount(split.y_train, minlength=10).double()
    assert torch.all((test_counts / all_counts - 0.25).abs() < 0.01)  # stratified
    idx = digits.test_indices()
    assert len(np.unique(idx)) == 450
    assert digits.split_fingerprint() == "e2597670fdeb84f3"  # the split in the model card
    assert split.x_train.min() >= 0 and split.x_train.max() <= 1
