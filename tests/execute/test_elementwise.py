"""Analog SiLU and softplus of a placed implicit SSM (aocsim/execute/elementwise.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from aocsim import compare, load_model
from aocsim.errors import InputError
from aocsim.execute.elementwise import HEADROOM, AnalogElementwise
from aocsim.execute.placement import HYBRID, Placement
from aocsim.execute.ssm_device import calibration_inputs, place_ssm
from aocsim.hardware.profiles.profile import load_device
from aocsim.tasks.groups import group, word_problems

QUIET = {"injection.dac_bits": None, "readout.adc_bits": None, "elementwise.gain_std": 0.0,
         "elementwise.offset_std": 0.0, "elementwise.shape_std": 0.0, "elementwise.noise_std": 0.0}


def _functions(overrides: dict, channels: int = 4000, chip: int = 0, calibrate: bool = False) -> AnalogElementwise:
    device = load_device("aoc48", overrides={**QUIET, "variation.chip_seed": chip, **overrides})
    scales = {site: (-4.0, 4.0, 2.0) for site in ("conv", "dt", "gate")}  # DAC over +-5, ADC over +-2.5
    return AnalogElementwise(device, 0, scales, dict.fromkeys(scales, channels), torch.float64,
                             calibrate=calibrate)


@pytest.fixture(scope="module")
def parity():
    model = load_model("parity-implicit").double()
    tokens, _ = word_problems(group("parity"), 6, 24, identity_prob=0.5, generator=3)
    cal_tokens, _ = word_problems(group("parity"), 16, 16, identity_prob=0.5, generator=99)
    return model, tokens, calibration_inputs(model, cal_tokens)


def test_without_errors_or_converters_the_analog_functions_are_exact(parity) -> None:
    model, tokens, cal = parity
    digital = place_ssm(model, load_device("ideal"), cal, Placement(tile_size=16).resolved(HYBRID), generator=0)
    analog = place_ssm(model, load_device("ideal"), cal, Placement(tile_size=16, elementwise="analog").resolved(HYBRID),
                       generator=0)
    assert isinstance(analog.model.blocks[0].elementwise, AnalogElementwise)
    for mode in ("sequential", "simultaneous"):
        a = analog(tokens, generator=1, mode=mode, tol=1e-9, max_iter=300)
        d = digital(tokens, generator=1, mode=mode, tol=1e-9, max_iter=300)
        # (two placements agree to rounding: the programs' least squares are not bit-reproducible)
        assert float((a.z - d.z).abs().max()) < 1e-12 and torch.equal(a.logits.argmax(-1), d.logits.argmax(-1))


def test_evaluation_noise_has_the_profile_std_and_is_keyed() -> None:
    f = _functions({"elementwise.noise_std": 0.01})
    f.reset(5)
    x = torch.linspace(-3, 3, 4000, dtype=torch.float64).repeat(3, 1)
    noise = f.silu(x, "gate") - F.silu(x)
    n = noise.numel()
    assert abs(float(noise.std()) / (0.01 * 2.0 / HEADROOM) - 1) < 4 / np.sqrt(2 * n)  # 4 sigma of a std estimate
    assert abs(float(noise.mean())) < 4 * 0.01 * 2.5 / np.sqrt(n)
    f.reset(5)
    assert torch.equal(f.silu(x, "gate") - F.silu(x), noise)  # same key, same numbers
    f.reset(6)
    assert not torch.equal(f.silu(x, "gate") - F.silu(x), noise)


def test_static_errors_are_drawn_per_chip_with_the_profile_std() -> None:
    f = _functions({"elementwise.gain_std": 0.02, "elementwise.offset_std": 0.01})
    x = torch.ones(1, 4000, dtype=torch.float64)
    gain = f.softplus(x, "dt") - f.softplus(torch.zeros_like(x), "dt")  # (1 + g)(softplus(1) - log 2)
    g = gain / (F.softplus(x) - F.softplus(torch.zeros_like(x))) - 1
    assert abs(float(g.std()) / 0.02 - 1) < 4 / np.sqrt(2 * 4000)
    offset = f.silu(torch.zeros_like(x), "conv")  # silu(0) = 0: the offset alone
    assert abs(float(offset.std()) / (0.01 * 2.0 / HEADROOM) - 1) < 4 / np.sqrt(2 * 4000)
    again, other = _functions({"elementwise.offset_std": 0.01}), _functions({"elementwise.offset_std": 0.01}, chip=1)
    assert torch.equal(again.silu(torch.zeros_like(x), "conv"), offset)
    assert not torch.equal(other.silu(torch.zeros_like(x), "conv"), offset)


def test_calibration_removes_the_static_errors() -> None:
    errors = {"elementwise.gain_std": 0.05, "elementwise.offset_std": 0.02}
    raw, fitted = _functions(errors, channels=500), _functions(errors, channels=500, calibrate=True)
    x = torch.linspace(-4, 4, 101, dtype=torch.float64)[:, None].expand(101, 500)
    exact = F.silu(x)
    assert float((raw.silu(x, "gate") - exact).abs().max()) > 0.1  # 5 % of 2.5 and more
    assert float((fitted.silu(x, "gate") - exact).abs().max()) < 1e-9  # no noise, no converters: exact
    noisy = _functions({**errors, "elementwise.noise_std": 0.01}, channels=500, calibrate=True)
    noisy.reset(1)
    static = (noisy.silu(x.repeat(8, 1), "gate") - exact.repeat(8, 1)).reshape(8, 101, 500).mean(0)
    # what is left after averaging the noise: the fit's error, about noise / sqrt(256 readings)
    assert float(static.abs().mean()) < 0.01 * 2.5 * 0.5


def test_the_adc_clips_at_full_scale_and_quantises() -> None:
    f = _functions({"readout.adc_bits": 4}, channels=4)
    y = f.silu(torch.tensor([[-10.0, 0.3, 1.0, 10.0]], dtype=torch.float64), "gate")
    full = 2.0 / HEADROOM
    assert float(y.max()) == pytest.approx(full)  # silu(10) = 10 clipped
    assert len(set(y.flatten().tolist())) <= 4 and all(
        abs((v + full) / (2 * full / 15) - round((v + full) / (2 * full / 15))) < 1e-9 for v in y.flatten().tolist())


@pytest.mark.slow
def test_analog_functions_on_aoc48_keep_parity_and_cost_conversions() -> None:
    tokens, targets = word_problems(group("parity"), 4, 32, identity_prob=0.5, generator=8)
    digital = compare("parity-implicit", "aoc48", tokens, targets)
    analog = compare("parity-implicit", "aoc48", tokens, targets, placement=dict(elementwise="analog"))
    assert float(analog.agreement.mean()) > 0.99 and "SiLU and softplus analog" in analog.attrs["placement"]
    assert not np.array_equal(analog.fixed_point_error, digital.fixed_point_error)  # they do something
    cfg = load_model("parity-implicit").config
    per_pass = cfg.n_layers * (cfg.conv_dim + cfg.n_heads + cfg.d_inner)  # one conversion per channel and site
    # per token: the injection's conversions once, then per evaluation of the map (k + 1 for k iterations)
    # the tiles' (a line through the digital run's points, its intercept the injection's and one
    # evaluation's) plus, analog, one conversion per channel of every site
    it_d, it_a = (ds.iterations.sel(path="device").values.ravel() for ds in (digital, analog))
    per_iteration, once = np.polyfit(it_d, digital.adc_conversions.values.ravel(), 1)
    assert np.allclose(analog.adc_conversions.values.ravel(), once + (it_a + 1) * (per_iteration + per_pass)
                       - per_iteration)


def test_unknown_elementwise_placements_are_one_line_errors(parity) -> None:
    model, tokens, cal = parity
    with pytest.raises(InputError, match=r"elementwise = 'optical'; expected one of \['digital', 'analog'\]"):
        Placement(elementwise="optical")
    with pytest.raises(InputError, match=r"elementwise = 'optical'; expected one of"):
        compare("parity-implicit", "aoc48", tokens[:1, :4], placement=dict(elementwise="optical"))
    with pytest.raises(InputError, match="applies to hybrid SSMs"):
        compare("digits-deq48", "aoc48", torch.zeros(1, 64, dtype=torch.float64), placement=dict(elementwise="analog"))
