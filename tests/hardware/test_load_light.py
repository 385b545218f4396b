"""The detectors' bias light per weight load (aocsim.hardware.engine.load_light, docs/PHYSICS.md section 6):
`noise.bias_units: auto` follows each load's weights, and a numeric bias short of a load's need is flagged."""

from __future__ import annotations

import warnings

import pytest
import torch
from click.testing import CliRunner

from aocsim import load_device
from aocsim.cli import main
from aocsim.hardware.engine.load_light import NegativeLightWarning
from aocsim.hardware.engine.loop import OpticalLoop

SHOT = {"noise.shot.enabled": True, "channels": 64}


def _weight(seed: int, scale: float = 1.0) -> torch.Tensor:
    w = torch.rand(64, 64, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 2 - 1
    return w * torch.linspace(0.2, 1.0, 64, dtype=torch.float64)[None, :] ** scale


def _fullest_column(w: torch.Tensor) -> float:
    """By hand: tanh and identity emitters at one unit of drive, the weights on the SLM as w / max|w|: a detector's
    bias must cover its column's transmissions, the fullest of either path's."""
    t = w / w.abs().max()
    return float(torch.maximum(t.clamp_min(0).sum(1), (-t).clamp_min(0).sum(1)).max())


def test_auto_bias_follows_each_load_and_sets_its_shot_noise() -> None:
    dev = load_device("ideal", {**SHOT, "noise.bias_units": "auto"})
    for seed, scale in ((0, 1.0), (1, 3.0)):
        w = _weight(seed, scale)
        loop = OpticalLoop(dev, w, alpha=0.5, beta=1.0)
        need = _fullest_column(w)
        assert loop.load_parts.noise.bias_units == pytest.approx(need, rel=1e-12)
        # shot noise at the bias light: var(D) = a D + a bias per path (docs/PHYSICS.md section 3)
        assert loop._var_b == pytest.approx(loop._var_a * need, rel=1e-12)
    assert _fullest_column(_weight(0)) > 1.5 * _fullest_column(_weight(1, 3.0))  # the loads differ


def test_a_numeric_bias_short_of_a_load_is_flagged_once_per_load() -> None:
    w = _weight(0)
    need = _fullest_column(w)
    with pytest.warns(NegativeLightWarning) as caught:
        OpticalLoop(load_device("ideal", {**SHOT, "noise.bias_units": need / 2}), w, alpha=0.5, beta=1.0)
    assert len(caught) == 1
    text = str(caught[0].message)
    assert "profile 'ideal'" in text and f"this load needs {need:.3g}" in text and "% of the detectors" in text
    with warnings.catch_warnings():
        warnings.simplefilter("error", NegativeLightWarning)
        OpticalLoop(load_device("ideal", {**SHOT, "noise.bias_units": need * 1.001}), w, alpha=0.5, beta=1.0)
        OpticalLoop(load_device("ideal", {"channels": 64}), w, alpha=0.5, beta=1.0)  # no shot noise: no light read


def test_auto_bias_on_the_projection_is_its_budgets_570_units() -> None:
    out = CliRunner().invoke(main, ["devices", "show", "aoc-projected", "--set", "noise.bias_units=auto"])
    assert out.exit_code == 0, out.output
    assert "(569.732 units of 440 nW, the reference load's own (auto))" in out.output
    assert "8.0 effective bits" in out.output
