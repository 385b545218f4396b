"""One light for noise and energy (docs/PHYSICS.md sections 3 and 6): the light the shot noise sees is light the
emitters' power pays for (what the SLM transmits of the 2N P_unit d each emitter puts on the SLM planes), in every
profile; the projection's precision and TOPS/W at that light,
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
from aocsim.hardware.engine.budget import noise_budget, reference_light
from aocsim.hardware.engine.step import difference_std
from aocsim.hardware.physics.energy import at_precision, emitter_optical_power_w
from aocsim.hardware.physics.noise import shot_noise_std
from aocsim.hardware.physics.sources import detector_coefficients
from aocsim.paths import devices_dir
from _light import led_bias_by_hand

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


# aoc16's LEDs swing 0.034 units over its sigmoid's full scale: a column of 16 pixels at full transmission collects
# at most 0.55 units, less than the twin's bias of 1 unit, so aoc16 takes each load's bias (auto; docs/PHYSICS.md
# section 6)
SHORT_OF_LIGHT = {"aoc16-twin"}  # shot noise off: its bias, the import's 1 unit, is never lit


@pytest.mark.parametrize("name", [pytest.param(p, marks=pytest.mark.xfail(strict=True, reason="bias above the light"))
                                  if p in SHORT_OF_LIGHT else p for p in PROFILES])
def test_the_noise_model_sees_light_the_emitters_pay_for(name: str) -> None:
    # Shot noise only, so that a detector's variance is the shot noise of its light: var(I) = 2 q B R P.
    dev = load_device(name, {"noise.shot.enabled": True, "noise.thermal.enabled": False, "noise.dark.enabled": False,
                             "noise.rin.enabled": False, "noise.multiplier": 1.0})
    v, n = dev.values, dev.channels or 48
    unit = v["noise.responsivity_a_per_w"] * v["noise.power_per_unit_w"]  # A per detector unit

    def light_w(var_units: torch.Tensor) -> torch.Tensor:
        return var_units * unit**2 / (2 * Q_E * v["noise.bandwidth_hz"] * v["noise.responsivity_a_per_w"])

    # a bias that follows the loads (auto): the noise budget's reference load's
    parts = reference_light(dev).parts if v["noise.bias_units"] == "auto" else dev.parts
    bias = parts.noise.bias_units
    seen = v["noise.power_per_unit_w"] * bias  # the bias light on one detector
    a, b = detector_coefficients(parts)
    noise = torch.tensor([0.0, a, 2 * b], dtype=torch.float64)
    signal = 0.5 * bias * torch.tensor([-1.0, 1.0], dtype=torch.float64)  # both ways around the bias
    folded = light_w(difference_std(signal, signal, noise) ** 2 / 2)  # the loop: one draw of D_P - D_Q
    reference = light_w(shot_noise_std(signal, parts.noise) ** 2)  # the unfolded yardstick, per path
    assert float(folded.mean()) == pytest.approx(seen, rel=1e-9)
    assert float(reference.mean()) == pytest.approx(seen, rel=1e-9)
    # the energy model: eta of each emitter's light reaches its N pixels on each path, P_unit d each
    arriving = emitter_optical_power_w(dev, n) * v["energy.optical_link_efficiency"] / 2
    assert arriving == pytest.approx(n * v["noise.power_per_unit_w"] * led_bias_by_hand(v), rel=1e-9)
    # a detector collects at most its column's N pixels at full transmission, each lit by one emitter
    assert seen <= arriving


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
    # TOPS/W: the static power (each emitter lights the 2N pixels of both paths) over a round trip, and one
    # 20-iteration inference over its readout window (settle, then K samples every m round trips)
    power = n * (2 * n * p_unit / (f["energy.optical_link_efficiency"] * f["energy.emitter_wall_plug_efficiency"])
                 + f["energy.detector_tia_power_w"]) + f["energy.slm_power_w"]  # one unit of drive (tanh, identity LEDs)
    continuous = 2 * n * n / (power * t_rt) / 1e12
    k, m = f.get("readout.samples", 40), f.get("readout.sample_interval_iterations", 8)
    window = f.get("readout.settle_iterations", 125) + (k - 1) * m + 1
    energy = (power * window * t_rt + n * f["energy.dac_energy_j"]
              + n * k * (f["energy.adc_energy_j"] + f["energy.digital_energy_per_op_j"]))
    per_inference = 2 * n * n * 20 / energy / 1e12

    out = CliRunner().invoke(main, ["devices", "show", "aoc-projected"])
    assert out.exit_code == 0, out.output
    shown_bits = float(re.search(r"precision\s+([\d.]+) effective bits", out.output).group(1))
    found = re.search(r"efficiency\s+([\d.]+) ([TG])OPS/W with the loop running; ([\d.]+) ([TG])OPS/W "
                      r"for one inference of 20 iterations in its readout window", out.output).groups()
    loop, inference = (float(x) * (1.0 if p == "T" else 1e-3) for x, p in (found[:2], found[2:]))
    assert shown_bits == pytest.approx(enob, abs=0.06)  # printed to 0.1 bit
    assert loop == pytest.approx(continuous, rel=1e-3) and inference == pytest.approx(per_inference, rel=1e-3)
    assert "negative light" not in out.output
    # what separates it from the paper's 500 TOPS/W: the light's energy per operation must fall by the factor that
    # leaves the rest of the module's power (electronics, SLMs) within 500 TOPS/W's budget
    light = n * 2 * n * p_unit / (f["energy.optical_link_efficiency"] * f["energy.emitter_wall_plug_efficiency"])
    factor = light / (2 * n * n / 500e12 / t_rt - (power - light))
    shown = float(re.search(r"([\d.]+)x lower \(", out.output).group(1))
    assert shown == pytest.approx(factor, rel=2e-3)  # printed to 3 significant digits


@pytest.mark.parametrize("overrides", [{}, {"channels": 256, "noise.thermal.feedback_resistance_ohm": 1e3}],
                         ids=["aoc-projected", "thermal-heavy"])
@pytest.mark.slow
def test_rescaled_precision_keeps_thermal_noise(overrides: dict) -> None:
    dev = load_device("aoc-projected", overrides)
    bits = noise_budget(dev)[-1].enob if overrides else dev["energy.precision_bits"]
    six = noise_budget(at_precision(dev, 6))[-1].enob
    assert six == pytest.approx(bits - 2, abs=0.01)
