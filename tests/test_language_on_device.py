"""A character-level language model in `compare` (issue 24, deliver 2): held-out windows as the
workload, the negative log2-likelihood of every target character on both paths."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from aocsim import compare, load_model
from aocsim.experiments.results import nll_bits, summarize
from aocsim.experiments.workloads import default_workload


@pytest.fixture(scope="module")
def lm():
    model = load_model("charlm-implicit")
    w = default_workload(model, sequences=2, length_factor=1)
    return model, w


def test_the_workload_is_held_out_text_and_its_next_characters(lm) -> None:
    from aocsim.tasks.corpus import pydoc_corpus
    from aocsim.train.language import card_vocabulary

    model, w = lm
    assert w.inputs.shape == (2, 128) and torch.equal(w.inputs[:, 1:], w.targets[:, :-1])
    text = card_vocabulary(model).decode(w.inputs[0].numpy())
    corpus = pydoc_corpus()
    assert corpus.text[corpus.split:].startswith(text)  # the first held-out window, in order


def test_nll_bits_is_the_targets_negative_log2_probability() -> None:
    logits = torch.tensor([[[0.0, 0.0]], [[np.log(3.0), 0.0]]])
    bits = nll_bits(logits, torch.tensor([[1], [0]]))
    np.testing.assert_allclose(bits.ravel(), [1.0, np.log2(4 / 3)])


def test_on_the_ideal_device_both_paths_give_the_same_bits(lm) -> None:
    model, w = lm
    x, y = w.inputs[:1, :12], w.targets[:1, :12]
    ds = compare(model, "ideal", x, y, placement={"rtol": 1e-6, "max_iter": 300}, calibration=w.calibration)
    exact, device = ds.nll_bits.sel(path="exact"), ds.nll_bits.sel(path="device")
    assert ds.nll_bits.attrs["units"] == "bits" and bool((exact > 0).all())
    np.testing.assert_allclose(device.values, exact.values, atol=1e-3)  # float32 model, rtol 1e-6 vs 1e-11
    s = summarize(ds)
    assert s["bits"]["exact"] == pytest.approx(float(exact.mean())) and s["unit"] == "token"
