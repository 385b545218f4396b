"""A character-level language model in `compare` (issue 24, deliver 2): held-out windows as the
workload, the negative log2-likelihood of every target character on both paths."""

from __future__ import annotations

import warnings

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


@pytest.mark.slow
def test_on_the_ideal_device_both_paths_give_the_same_bits(lm) -> None:
    model, w = lm
    x, y = w.inputs[:1, :12], w.targets[:1, :12]
    ds = compare(model, "ideal", x, y, placement={"rtol": 1e-6, "max_iter": 300}, calibration=w.calibration)
    exact, device = ds.nll_bits.sel(path="exact"), ds.nll_bits.sel(path="device")
    assert ds.nll_bits.attrs["units"] == "bits" and bool((exact > 0).all())
    np.testing.assert_allclose(device.values, exact.values, atol=1e-3)  # float32 model, rtol 1e-6 vs 1e-11
    s = summarize(ds)
    assert s["bits"]["exact"] == pytest.approx(float(exact.mean())) and s["unit"] == "character"


@pytest.mark.slow
def test_generation_on_the_ideal_device_is_the_exact_generation(lm) -> None:
    """Greedy decoding, noise off, tight tolerance: the device's text is the exact path's."""
    from aocsim.experiments.generate import DeviceNextLogits, generate

    model, w = lm
    exact = generate(model, "The ", 6, temperature=0)
    device = generate(model, "The ", 6, temperature=0, next_logits=DeviceNextLogits(
        model, "ideal", max_length=10, placement={"rtol": 1e-6, "max_iter": 300}, calibration=w.calibration))
    assert device.text == exact.text


@pytest.mark.slow
def test_generate_on_a_device_prints_both_texts_and_refuses_bad_requests() -> None:
    from click.testing import CliRunner

    from aocsim.cli import main

    out = CliRunner().invoke(main, ["--threads", "1", "generate", "charlm-implicit", "--prompt", "def ",
                                    "--length", "3", "--device", "aoc48", "--seed", "2"])
    assert out.exit_code == 0, out.output
    lines = out.output.strip().splitlines()
    assert lines[-2].startswith("exact path: def ") and lines[-1].startswith("aoc48 (chip 0): def ")
    for args, message in ((["--device", "aoc99"], "unknown device"), (["--length", "0"], "length = 0")):
        bad = CliRunner().invoke(main, ["generate", "charlm-implicit", "--prompt", "a", *args])
        assert bad.exit_code == 1 and message in bad.output and bad.output.count("\n") == 1, bad.output


@pytest.mark.slow
def test_a_language_model_is_summarised_and_drawn_in_bits_per_character(lm, capsys, monkeypatch, tmp_path) -> None:
    """Issue 41, finding 5: a character model's summary says bits per character (not per token), an
    explicit model's one pass is shown as one pass (not 'iterations 0.0, converged N'), and the compare
    figure draws bits per character, its convergence legend naming the residual it plots."""
    import matplotlib.pyplot as plt

    from aocsim.cli.compare import _print_compare
    from aocsim.experiments.plots import plot_compare

    model, w = lm
    x, y = w.inputs[:1, :8], w.targets[:1, :8]
    implicit = compare(model, "ideal", x, y, calibration=w.calibration)
    explicit_model = load_model("charlm-explicit1")
    explicit = compare(explicit_model, "ideal", x, y, calibration=default_workload(explicit_model).calibration)
    _print_compare(summarize(implicit))
    _print_compare(summarize(explicit))
    text = capsys.readouterr().out
    assert "bits per character" in text and "bits per token" not in text and "x 8 characters" in text
    first, second = text.split("model charlm-explicit1")
    assert "iterations         exact" in first and "device status" in first
    assert "(explicit: one pass per token)" in second and "iterations         none: one pass" in second
    assert "device status" not in second and "one pass" in summarize(explicit)["terms"]
    kept: list = []
    monkeypatch.setattr(plt, "close", lambda fig=None: kept.append(fig))
    plot_compare({"charlm-implicit": implicit}, tmp_path / "c.png")
    score_ax, _, convergence_ax = kept[-1].axes
    assert score_ax.get_ylabel() == "bits per character"
    legend = [t.get_text() for t in convergence_ax.get_legend().get_texts()]
    assert legend and all("(relative)" in t for t in legend) and "relative residual" in convergence_ax.get_ylabel()
    assert convergence_ax.get_yscale() == "log"
    with warnings.catch_warnings():  # an explicit model alone: residual 0 everywhere, a linear axis, no warning
        warnings.simplefilter("error")
        plot_compare({"charlm-explicit1": explicit}, tmp_path / "e.png")
    assert kept[-1].axes[2].get_yscale() == "linear"
