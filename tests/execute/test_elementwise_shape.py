"""Shape errors of the analog SiLU and softplus circuits (`elementwise.shape_std`): what a per-channel
gain-and-offset calibration leaves (aocsim/execute/elementwise.py; docs/PHYSICS.md section 3)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from aocsim.execute.elementwise import HEADROOM, PROBES, AnalogElementwise
from aocsim.hardware.profiles.profile import load_device

# parity-implicit's ranges per site on its calibration sequences: smallest x, largest x, largest |f(x)|
PARITY = {"conv": (-10.69, 12.262, 12.262), "dt": (-5.671, -1.835, 0.148), "gate": (-5.465, 7.777, 7.774)}
CHANNELS = 2000
# aoc48's analog functions without converters or noise: its static gain and offset errors stay
CLEAN = {"injection.dac_bits": None, "readout.adc_bits": None, "elementwise.noise_std": 0.0}


def _functions(overrides: dict, scales: dict = PARITY, channels: int = CHANNELS, block: int = 0,
               generator: int = 0) -> AnalogElementwise:
    device = load_device("aoc48", overrides={"variation.chip_seed": 2, **overrides})
    return AnalogElementwise(device, block, scales, dict.fromkeys(scales, channels), torch.float64,
                             generator=generator)


def _residual(f: AnalogElementwise, site: str) -> float:
    """RMS over the calibration sweep's points and the channels of corrected reading - f(x), over full scale."""
    lo, hi, peak = PARITY[site]
    x = torch.linspace(lo, hi, PROBES, dtype=torch.float64)[:, None].expand(PROBES, CHANNELS)
    exact, read = (F.softplus(x), f.softplus(x, site)) if site == "dt" else (F.silu(x), f.silu(x, site))
    return float((read - exact).pow(2).mean().sqrt()) / (peak / HEADROOM)


def _predicted(site: str, std: float) -> float:
    """The same figure from the model's definition, to first order in the shape errors: f((1 + a) x + b)
    - f(x) = (a x + b) f'(x), a and b independent N(0, std^2); the calibration removes its part in the
    span of {1, f} on the sweep (least squares), the rest stays."""
    lo, hi, peak = PARITY[site]
    x = np.linspace(lo, hi, PROBES)
    s = 1 / (1 + np.exp(-x))
    f, df = (np.logaddexp(0, x), s) if site == "dt" else (x * s, s * (1 + x * (1 - s)))
    basis, _ = np.linalg.qr(np.stack([np.ones_like(x), f], 1))
    left = [d - basis @ (basis.T @ d) for d in (x * df, df)]
    return std * np.sqrt(sum(np.mean(r ** 2) for r in left)) / (peak / HEADROOM)


def test_without_shape_errors_the_circuits_read_as_before_bit_for_bit() -> None:
    scales = {"conv": (-4.0, 4.0, 3.9), "dt": (-5.0, -1.0, 0.4), "gate": (-3.0, 6.0, 6.0)}
    f = _functions({"elementwise.shape_std": 0.0}, scales, channels=5, block=1, generator=7)  # aoc48's converters, noise
    f.reset(3)
    x = torch.linspace(-3, 3, 10, dtype=torch.float64).reshape(2, 5)
    y = torch.cat([f.silu(x, "conv"), f.softplus(x - 2, "dt"), f.silu(x, "gate")]).flatten()
    # the same calls before shape errors were modelled (aocsim at bdd23ea)
    before = [-0.13890534779606636, -0.20491922719304062, -0.2631838337903396, -0.26579714937725873,
              -0.14029531285001923, 0.19738889509000235, 0.7386628466409559, 1.398640981090285,
              2.129364837858191, 2.8543283386474365, 0.00631140222295012, 0.01254644124011746,
              0.02441404802987198, 0.04846027304741758, 0.09251135635670217, 0.1727248884726183,
              0.31352361252602684, 0.47367629502873687, 0.4738167120262045, 0.47284807515588817,
              -0.1507627542719625, -0.21335117481924432, -0.26224440570914187, -0.28311237808670603,
              -0.1467789358075337, 0.1823760707265578, 0.7402765469576154, 1.3996924145615317,
              2.1411821311018193, 2.861695969634542]
    assert torch.equal(y, torch.tensor(before, dtype=torch.float64))
    shaped = _functions({"elementwise.shape_std": 0.05}, scales, channels=5, block=1, generator=7)
    for site in scales:  # the shape errors come from their own coordinates: gain and offset draws unchanged
        assert torch.equal(shaped.gain[site], f.gain[site]) and torch.equal(shaped.offset[site], f.offset[site])


def test_lab_profiles_assume_five_percent_and_the_twins_none() -> None:
    assert [load_device(n).values["elementwise.shape_std"] for n in ("aoc48", "aoc16")] == [0.05, 0.05]
    assert [load_device(n).values["elementwise.shape_std"] for n in ("ideal", "aoc48-twin", "aoc16-twin")] == [0.0] * 3


@pytest.mark.parametrize("site", ["conv", "dt", "gate"])
def test_calibration_leaves_the_shape_errors_in_proportion_to_their_std(site: str) -> None:
    default = load_device("aoc48").values["elementwise.shape_std"]
    measured = {k: _residual(_functions({**CLEAN, "elementwise.shape_std": k * default}), site) for k in (0.5, 1, 2)}
    # the default's residual: the first-order prediction, within the 2000 channels' sampling error (about 2 %)
    assert measured[1] == pytest.approx(_predicted(site, default), rel=0.05)
    # linear in the std (the same draws, scaled): second-order terms of a few per cent at twice the default
    assert measured[0.5] / 0.5 == pytest.approx(measured[1], rel=0.05)
    assert measured[2] / 2 == pytest.approx(measured[1], rel=0.05)
    # and the gain and offset errors alone are removed (the calibration's own error, rounding)
    assert _residual(_functions({**CLEAN, "elementwise.shape_std": 0.0}), site) < 1e-9
