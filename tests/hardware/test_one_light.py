"""One light for noise and energy (docs/PHYSICS.md sections 3 and 6): the light the shot noise sees is the
light the emitters' power pays for, in every profile; the projection's precision and TOPS/W at that light,
recomputed here from the YAML figures with numpy (not the package's helpers); precision rescaling keeps
thermal noise."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
import yaml
from click.testing import CliRunner

from aocsim import load_device
from aocsim.cli import main
from aocsim.hardware.engine.budget import noise_budget
from aocsim.hardware.engine.step import difference_std
from aocsim.hardware.physics.energy import at_precision, emitter_optical_power_w
from aocsim.hardware.physics.noise import shot_noise_std
from aocsim.hardware.physics.sources import detector_coefficients
from aocsim.paths import devices_dir

Q_E, K_B = 1.602176634e-19, 1.380649e-23
PROFILES = sorted(p.stem for p in devices_dir().glob("*.yaml"))


def _figures(name: str) -> dict:
    """Dotted keys of a bundled profile, read from its YAML file and its bases (no aocsim code)."""
    raw = yaml.safe_load((devices_dir() / f"{name}.yaml").read_text())
    if "base" in raw:
        return {**_figures(raw["base"]), **raw["overrides"]}
    out: dict = {}

    def walk(node: dict, prefix: str) -> None:
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            else:
                out[f"{prefix}{key}"] = value
    walk(raw, "")
    return out


@pytest.mark.parametrize("name", PROFILES)
def test_the_noise_model_sees_the_light_the_energy_model_pays_for(name: str) -> None:
    # Shot noise only, so that a detector's variance is the shot noise of its light: var(I) = 2 q B R P.
    dev = load_device(name, {"noise.shot.enabled": True, "noise.thermal.enabled": False, "noise.dark.enabled": False,
                             "noise.rin.enabled": False, "noise.multiplier": 1.0})
    v = dev.values
    unit = v["noise.responsivity_a_per_w"] * v["noise.power_per_unit_w"]  # A per detector unit

    def light_w(var_units: torch.Tensor) -> torch.Tensor:
        return var_units * unit**2 / (2 * Q_E * v["noise.bandwidth_hz"] * v["noise.responsivity_a_per_w"])

    # the energy model: each emitter's light, eta_link of it arriving, spread over its 2 paths' detectors
    paid = emitter_optical_power_w(dev) * v["energy.optical_link_efficiency"] / 2
    a, b = detector_coefficients(dev.parts)
    noise = torch.tensor([0.0, a, 2 * b], dtype=torch.float64)
    signal = 0.5 * v["noise.bias_units"] * torch.tensor([-1.0, 1.0], dtype=torch.float64)  # both ways around the bias
    folded = light_w(difference_std(signal, signal, noise) ** 2 / 2)  # the loop: one draw of D_P - D_Q
    reference = light_w(shot_noise_std(signal, dev.parts.noise) ** 2)  # the unfolded yardstick, per path
    assert float(folded.mean()) == pytest.approx(paid, rel=1e-9)
    assert float(reference.mean()) == pytest.approx(paid, rel=1e-9)


@pytest.mark.slow
def test_projection_precision_and_tops_per_watt_from_its_figures() -> None:
    f = _figures("aoc-projected")
    n, t_rt, p_unit, bias = f["channels"], f["loop.round_trip_s"], f["noise.power_per_unit_w"], f["noise.bias_units"]
    r, bw = f["noise.responsivity_a_per_w"], f["noise.bandwidth_hz"]
    # non-negative light: at the LED bias (1, the tanh's full scale) the fullest column of the budget's reference
    # weights (torch.rand seed 0, uniform in [-1, 1]) must stay >= 0 for any signal in [-1, 1]
    w = (torch.rand(n, n, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 2 - 1).numpy()
    w = w / np.abs(w).max()
    assert bias >= max(np.maximum(w, 0).sum(axis=1).max(), np.maximum(-w, 0).sum(axis=1).max())
    # effective bits: shot noise at the bias light and thermal noise, each detector of the pair, in detector units,
    # to the node through the budget's normalized gain 18.6 / N, against a full-scale sine on the 1.3 V injection range
    per_path = (2 * Q_E * bw * r * p_unit * bias + 4 * K_B * f["noise.thermal.temperature_k"] * bw
                / f["noise.thermal.feedback_resistance_ohm"]) / (r * p_unit) ** 2
    node_std = 18.6 / n * math.sqrt(2 * per_path)
    amplitude = (f["injection.clip"][1] - f["injection.clip"][0]) / 2
    enob = (20 * math.log10(amplitude / math.sqrt(2) / node_std) - 1.76) / 6.02
    assert enob == pytest.approx(f["energy.precision_bits"], abs=0.05)  # sized for the bits TOPS/W is quoted at
    # TOPS/W: the static power (emitters carry the bias light of both paths' detectors) over a round trip, and one
    # 20-iteration inference over its readout window (settle, then K samples every m round trips)
    power = n * (2 * p_unit * bias / (f["energy.optical_link_efficiency"] * f["energy.emitter_wall_plug_efficiency"])
                 + f["energy.detector_tia_power_w"]) + f["energy.slm_power_w"]
    continuous = 2 * n * n / (power * t_rt) / 1e12
    k, m = f.get("readout.samples", 40), f.get("readout.sample_interval_iterations", 8)
    window = f.get("readout.settle_iterations", 125) + (k - 1) * m + 1
    energy = (power * window * t_rt + n * f["energy.dac_energy_j"]
              + n * k * (f["energy.adc_energy_j"] + f["energy.digital_energy_per_op_j"]))
    per_inference = 2 * n * n * 20 / energy / 1e12

    out = CliRunner().invoke(main, ["devices", "show", "aoc-projected"])
    assert out.exit_code == 0, out.output
    shown_bits = float(re.search(r"precision\s+([\d.]+) effective bits", out.output).group(1))
    loop, inference = map(float, re.search(r"efficiency\s+([\d.]+) TOPS/W with the loop running; ([\d.]+) TOPS/W "
                                           r"for one inference of 20 iterations in its readout window",
                                           out.output).groups())
    assert shown_bits == pytest.approx(enob, abs=0.06)  # printed to 0.1 bit
    assert loop == pytest.approx(continuous, rel=1e-3) and inference == pytest.approx(per_inference, rel=1e-3)
    assert "negative light" not in out.output


@pytest.mark.parametrize("overrides", [{}, {"channels": 256, "noise.thermal.feedback_resistance_ohm": 1e3}],
                         ids=["aoc-projected", "thermal-heavy"])
@pytest.mark.slow
def test_rescaled_precision_keeps_thermal_noise(overrides: dict) -> None:
    dev = load_device("aoc-projected", overrides)
    bits = noise_budget(dev)[-1].enob if overrides else dev["energy.precision_bits"]
    six = noise_budget(at_precision(dev, 6))[-1].enob
    assert six == pytest.approx(bits - 2, abs=0.01)
