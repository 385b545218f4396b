"""Every cost of docs/PHYSICS.md section 6 re-derived here, independently of the pricing code, and held
against what `aocsim.compare` records and `aocsim devices show` prints.

The derivation reads only the profile's numbers (`profile.values`), the models' weight shapes (tiles:
ceil(rows / N) x ceil(cols / N)), the placement's settings and the iterations the Dataset reports. It
never calls aocsim.hardware.physics.energy / converters, aocsim.hardware.engine.machine / dynamics
pricing: each section-6 cost is one small function below, with the equation it implements quoted.
The code's own answer is read from the Dataset (and, for the energy per component, which the Dataset
keeps only as a total, from `energy_j` applied to the Dataset's recorded activity: the code under test).

The emitters' light (`emitter_power_w`) is written out by hand in `tests/_light.py`, which the energy tests
share; the native loop's early stop (`native_early_stop`) prices the ADC samples the stop read.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

import numpy as np
import pytest
import torch

from aocsim import compare, load_model
from aocsim.experiments.workloads import default_workload
from aocsim.hardware.profiles.profile import load_device
from _light import emitter_w_by_hand

V48 = load_device("aoc48").values
RTOL = 1e-9  # exact bookkeeping: only float64 summation order differs

# ---------------------------------------------------------------------------------------------------------
# The derivation: docs/PHYSICS.md section 6, one function per cost (values = a profile's `values`)
# ---------------------------------------------------------------------------------------------------------


def emitter_power_w(values: Mapping[str, Any], n: int) -> float:
    """Optical power of one emitter: `tests/_light.py` writes it out by hand (the LED bias d from the cubics)."""
    # "P_emit = 2 N P_unit d / eta    the light of one emitter: 2N pixels at P_unit d, through the optics before the SLM"
    return emitter_w_by_hand(values, n)


def static_power_w(values: Mapping[str, Any], n: int) -> dict[str, float]:
    # "P_static = N (P_emit / eta_wpe + P_det_tia) + P_slm    emitters, detectors + TIA, SLM"
    return {"emitters": n * emitter_power_w(values, n) / values["energy.emitter_wall_plug_efficiency"],
            "slm": float(values["energy.slm_power_w"]), "detectors_tia": n * values["energy.detector_tia_power_w"]}


def converter_rate_hz(values: Mapping[str, Any], which: str) -> float:
    # "A converter makes one conversion per interval: m_adc ... m_dac ... round trips"
    every = values["readout.sample_interval_iterations" if which == "adc" else "injection.dac_interval_iterations"]
    return 1.0 / (every * values["loop.round_trip_s"])


def conversion_energy_j(values: Mapping[str, Any], which: str) -> float:
    # "E_conv = E_0 2^(b - b_0) max(1, f / f_knee)"  (b_0 for an ideal converter, bits null)
    b0 = values["energy.precision_bits"]
    bits = values["readout.adc_bits" if which == "adc" else "injection.dac_bits"]
    e0 = values[f"energy.{which}_energy_j"]
    return e0 * 2.0 ** ((b0 if bits is None else bits) - b0) * max(
        1.0, converter_rate_hz(values, which) / values["energy.converter_knee_hz"])


def pass_time_s(values: Mapping[str, Any]) -> float:
    # "t_pass = max(t_rt, m_adc t_rt / c_adc, m_dac t_rt / c_dac)"
    rt = values["loop.round_trip_s"]
    return max(rt, values["readout.sample_interval_iterations"] * rt / values["readout.adcs_per_channel"],
               values["injection.dac_interval_iterations"] * rt / values["injection.dacs_per_channel"])


def product_latency_s(values: Mapping[str, Any]) -> float:
    # "t_latency = (m_dac + m_adc) t_rt + t_digital"
    return ((values["injection.dac_interval_iterations"] + values["readout.sample_interval_iterations"])
            * values["loop.round_trip_s"] + values["readout.digital_latency_s"])


def evaluations(iterations: np.ndarray) -> np.ndarray:
    # "A solve of k iterations evaluates its map k + 1 times ... and each evaluation is a product charged"
    return np.asarray(iterations, dtype=np.float64) + 1.0


def native_readout_window(values: Mapping[str, Any], n: int) -> dict[str, float]:
    # "With the readout stop it runs the whole window, settle + (K - 1) m + 1 round trips, with N K ADC
    # conversions and N K digital additions (the average)"; "converts N inputs once"
    k, m = values["readout.samples"], values["readout.sample_interval_iterations"]
    trips = values["readout.settle_iterations"] + (k - 1) * m + 1
    return {"round_trips": trips, "time_s": trips * values["loop.round_trip_s"], "dac_conversions": n,
            "adc_conversions": n * k, "digital_ops": n * k}


def native_early_stop(values: Mapping[str, Any], n: int, k: Any) -> dict[str, Any]:
    """A native inference under an early stop: the stop reads the ADC's samples, so k is a whole number of them."""
    # "a stop after j samples ran k = j m round trips, with j N conversions and N comparisons per sample"
    m = values["readout.sample_interval_iterations"]
    k = np.asarray(k, dtype=np.float64)
    assert np.all(k % m == 0) and np.all(k >= m), f"an early stop ran {k} round trips: not whole samples of {m}"
    samples = k / m
    return {"round_trips": samples * m, "time_s": samples * m * values["loop.round_trip_s"], "dac_conversions": n,
            "adc_conversions": n * samples, "digital_ops": n * samples}


# aoc48's dead input channel: "input channel 9 (index 8) has efficiency 0: it is dead" (docs/PHYSICS.md section 2);
# a tile program skips it: "W gets a zero column there and the inputs move to the next live position"
# (aocsim/execute/tile_program.py), so K inputs take more than K input slots of a tile row
DEAD = (8,)


def input_slots(inputs: int, n: int, dead: tuple[int, ...] = DEAD) -> int:
    """The input slots K inputs span on tile rows of n channels, the dead positions of each tile skipped."""
    slot, live = 0, 0
    while live < inputs:
        live += slot % n not in dead
        slot += 1
    return slot


def tile_grid(shape: tuple[int, int], n: int) -> tuple[int, int]:
    # "A matrix larger than one module is cut into T tiles" of N x N (the inputs on their slots)
    return math.ceil(shape[0] / n), math.ceil(input_slots(shape[1], n) / n)


def product(values: Mapping[str, Any], shape: tuple[int, int], n: int, passes: int, partial_sums: str,
            modules: int | None) -> dict[str, float]:
    """One tile product per sample, its weight loads apart (`loads`: what the rows taking part share)."""
    (rows, cols), outputs, inputs = tile_grid(shape, n), shape[0], input_slots(shape[1], n)
    tiles = rows * cols
    # weight-stationary: "All tiles of a product run at once"; time-multiplexed: "tiles run in waves of M"
    waves = 1 if modules is None else math.ceil(tiles / modules)
    # "the whole input through the DACs of each tile row" (its slots, the dead one included), "one ADC conversion per output (analog partial sums)
    # or per output and tile column (digital, each added into its output), and with K > 1 each pass's
    # reading added into the mean"
    adc = outputs if partial_sums == "analog" else cols * outputs
    added = (adc if partial_sums == "digital" else 0) + (adc if passes > 1 else 0)
    own = {
        # "a product of K passes on one wave takes K t_pass + t_latency"; "ceil(T / M) (t_reload + K t_pass)"
        "time_s": waves * passes * pass_time_s(values) + product_latency_s(values),
        "dac_conversions": rows * inputs * passes, "adc_conversions": adc * passes, "digital_ops": added * passes,
        "round_trips": tiles * passes,  # "A tiled matrix product makes one round trip per tile pass"
        "busy_s": tiles * passes * pass_time_s(values),  # a module busy while it runs its tile's passes
        "weight_loads": 0.0}
    # "Before each product every tile is written onto its module again", "a wave's tiles written at once"
    loads = ({"time_s": 0.0, "weight_loads": 0.0} if modules is None else
             {"time_s": waves * values["slm.reload_time_s"], "weight_loads": float(tiles)})
    return {"own": own, "loads": loads}


def load_share(evals: np.ndarray) -> np.ndarray:
    """[B, L] -> [B, L]: a sequence's share of its products' loads at each token."""
    # "a sample pays 1 / (the samples taking part) of each of its products' loads and reload time (in a
    # token-by-token run, the sequences still iterating at that product)"
    share = np.zeros_like(evals, dtype=np.float64)
    for t in range(evals.shape[1]):
        for j in range(int(evals[:, t].max())):
            taking = evals[:, t] > j
            share[taking, t] += 1.0 / taking.sum()
    return share


def energy_components(values: Mapping[str, Any], n: int, modules: int, act: Mapping[str, Any]) -> dict[str, Any]:
    # "E = modules P_static t + n_dac E_dac + n_adc E_adc + n_ops E_op + n_loads E_load", with "While a module
    # runs no pass ... its emitters and electronics idle at energy.idle_power_fraction of their power ...
    # its SLMs hold their pattern at full power"
    p = static_power_w(values, n)
    idle = modules * np.asarray(act["time_s"]) - act["busy_s"]
    lit = act["busy_s"] + values["energy.idle_power_fraction"] * idle
    out = {"emitters": p["emitters"] * lit, "detectors_tia": p["detectors_tia"] * lit,
           "slm": modules * p["slm"] * np.asarray(act["time_s"]) + act["weight_loads"] * values["energy.slm_reload_energy_j"],
           "dac": act["dac_conversions"] * conversion_energy_j(values, "dac"),
           "adc": act["adc_conversions"] * conversion_energy_j(values, "adc"),
           "digital": act["digital_ops"] * values["energy.digital_energy_per_op_j"]}
    out["total"] = sum(out.values())
    return out


def loop_tops_per_watt(values: Mapping[str, Any], n: int, converting: bool | None = None) -> float:
    # "TOPS/W = 2 N^2 / (P_static t [+ N (E_dac + E_adc + E_op)]) / 1e12" (bracket: converts_every_round_trip;
    # t = t_rt, or t_pass when it converts: a tile pass at the converters' pace)
    if converting is None:
        converting = values["energy.converts_every_round_trip"]
    extra = (n * (conversion_energy_j(values, "dac") + conversion_energy_j(values, "adc")
                  + values["energy.digital_energy_per_op_j"]) if converting else 0.0)
    t = pass_time_s(values) if converting else values["loop.round_trip_s"]
    return 2 * n * n / (sum(static_power_w(values, n).values()) * t + extra) / 1e12


def test_a_converting_machine_runs_its_passes_at_the_converters_pace() -> None:
    from aocsim.hardware.physics.energy import tops_per_watt

    profile = load_device("aoc48")
    for converting in (False, True):
        assert tops_per_watt(profile, converting=converting) == pytest.approx(
            loop_tops_per_watt(V48, 48, converting), rel=RTOL)


def inference_tops_per_watt(n: int, iterations: int, energy: float) -> float:
    # "2 N^2 operations per iteration its solve needed over the inference's whole energy"
    return 2 * n * n * iterations / energy / 1e12


# ---------------------------------------------------------------------------------------------------------
# The placements: what a model's run did per sample (per token), derived from the above
# ---------------------------------------------------------------------------------------------------------

KEYS = ("time_s", "dac_conversions", "adc_conversions", "digital_ops", "round_trips", "weight_loads", "busy_s")


def ssm_activity(values: Mapping[str, Any], model: Any, iterations: np.ndarray, *, n: int = 48,
                 on_tiles: tuple[str, ...] = ("inject", "in_proj", "out_proj"), passes: int = 1,
                 partial_sums: str = "analog", modules: int | None = None) -> tuple[dict, int]:
    """A hybrid SSM's activity per token (`iterations` per run [C, S, B, L]) on modules of n channels, and the
    modules powered."""
    shapes = {name: tuple(mod.weight.shape) for name, mod in model.named_modules()
              if isinstance(mod, torch.nn.Linear) and name.split(".")[-1] in on_tiles}
    tiles = sum(math.prod(tile_grid(s, n)) for s in shapes.values())
    held = modules is None or modules >= tiles  # "modules unset or at least the model's tiles"
    powered = tiles if held else modules
    per = {name: product(values, s, n, passes, partial_sums, None if held else modules) for name, s in shapes.items()}
    evals = evaluations(iterations)
    out = {key: np.zeros_like(evals) for key in KEYS}
    for c in range(evals.shape[0]):
        for s in range(evals.shape[1]):
            e = evals[c, s]
            share = load_share(e)
            for name, p in per.items():
                # "the injection once (tokens enter once), then every evaluation the projections' products"
                count, part = (np.ones_like(e), np.full_like(e, 1.0 / e.shape[0])) if name == "inject" else (e, share)
                for key in KEYS:
                    out[key][c, s] += count * p["own"][key] + part * p["loads"].get(key, 0.0)
    return out, powered


def check_dataset(ds: Any, values: Mapping[str, Any], derived: Mapping[str, Any], modules: int, n: int) -> None:
    """The Dataset's counts, time, energy and utilisation against the derivation (and per component, the code's
    pricing of the Dataset's own activity against the derivation)."""
    from aocsim.hardware.physics.energy import Activity, energy_j  # the code under test, for its components

    assert int(ds.attrs["modules"]) == modules
    got = {key: ds[key].values for key in KEYS if key != "time_s"}
    got["time_s"] = ds.hardware_time_s.sel(path="device").values
    for key in KEYS:
        np.testing.assert_allclose(got[key], np.broadcast_to(derived[key], got[key].shape), rtol=RTOL, atol=0,
                                   err_msg=key)
    e = energy_components(values, n, modules, derived)
    np.testing.assert_allclose(ds.energy_j.values, np.broadcast_to(e["total"], ds.energy_j.shape), rtol=RTOL,
                               err_msg="energy_j")
    code = energy_j(load_device(ds.attrs["device"]), Activity(**got, channels=n, modules=modules))
    for name, value in e.items():
        np.testing.assert_allclose(code[name], np.broadcast_to(value, got["time_s"].shape), rtol=RTOL, atol=0,
                                   err_msg=f"energy {name}")
    from aocsim.experiments.metrics import point_metrics  # busy module-seconds over powered ones
    used = point_metrics(ds, ("module_utilisation",)).module_utilisation.values
    axes = tuple(range(2, np.ndim(got["time_s"])))
    busy = np.broadcast_to(derived["busy_s"], got["time_s"].shape).sum(axes)
    powered = modules * np.broadcast_to(derived["time_s"], got["time_s"].shape).sum(axes)
    np.testing.assert_allclose(used, busy / powered, rtol=RTOL, err_msg="module_utilisation")


# ---------------------------------------------------------------------------------------------------------
# compare: digits-deq48 (native), parity-implicit, a5-implicit (recommended placement), charlm-implicit
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def digits():
    return default_workload(load_model("digits-deq48"), samples=4)


@pytest.mark.parametrize("stop", ["tolerance", "readout"])
def test_a_native_deq_costs_what_section_6_derives(stop: str, digits) -> None:
    ds = compare("digits-deq48", "aoc48", digits.inputs, placement={"stop": stop}, calibration=digits.calibration)
    n = 48  # the DEQ's state: the machine's channels
    k = ds.iterations.sel(path="device").values
    rule = native_readout_window(V48, n) if stop == "readout" else native_early_stop(V48, n, k)
    # the loop runs every round trip on its one module: busy all along, no weight loads
    derived = {**rule, "weight_loads": 0.0, "busy_s": rule["time_s"]}
    check_dataset(ds, V48, derived, 1, n)
    assert ds.hardware_time_s.attrs["description"].startswith("readout stop" if stop == "readout" else "early stop")


@pytest.fixture(scope="module")
def parity():
    model = load_model("parity-implicit")
    return model, default_workload(model, sequences=3, length_factor=1)


@pytest.mark.parametrize(("modules", "partial_sums", "averaging"),
                         [(None, "analog", 1), (None, "digital", 2), (1, "analog", 1), (2, "analog", 1),
                          (4, "digital", 1)])
def test_parity_on_tiles_costs_what_section_6_derives(modules, partial_sums, averaging, parity) -> None:
    """Weight-stationary (one module per tile: 10) and time-multiplexed on 1, 2 and 4 modules."""
    model, w = parity
    placement = {"partial_sums": partial_sums, "averaging": averaging, **({"modules": modules} if modules else {})}
    ds = compare("parity-implicit", "aoc48", w.inputs[:, :6], placement=placement, calibration=w.calibration)
    derived, powered = ssm_activity(V48, model, ds.iterations.sel(path="device").values, passes=averaging,
                                    partial_sums=partial_sums, modules=modules)
    check_dataset(ds, V48, derived, powered, 48)
    assert (float(ds.weight_loads.max()) > 0) == (modules is not None)


@pytest.mark.slow
def test_a5_at_the_recommended_placement_costs_what_section_6_derives() -> None:
    """The recommended placement (aocsim/experiments/bench.py, docs/GUIDE.md): projections on tiles, the injection
    digital, 16 passes averaged per product, predistorted drive (which prices nothing)."""
    model = load_model("a5-implicit")
    w = default_workload(model, sequences=2, length_factor=1)
    placement = {"on_tiles": "in_proj,out_proj", "averaging": 16, "predistort": True}
    ds = compare("a5-implicit", "aoc48", w.inputs[:, :4], placement=placement, calibration=w.calibration)
    derived, powered = ssm_activity(V48, model, ds.iterations.sel(path="device").values,
                                    on_tiles=("in_proj", "out_proj"), passes=16)
    check_dataset(ds, V48, derived, powered, 48)


@pytest.mark.slow
def test_charlm_costs_what_section_6_derives() -> None:
    model = load_model("charlm-implicit")
    w = default_workload(model, sequences=2, length_factor=1)
    ds = compare("charlm-implicit", "aoc48", w.inputs[:, :5], calibration=w.calibration)
    derived, powered = ssm_activity(V48, model, ds.iterations.sel(path="device").values)
    check_dataset(ds, V48, derived, powered, 48)


# ---------------------------------------------------------------------------------------------------------
# aocsim devices show: the printed budget
# ---------------------------------------------------------------------------------------------------------

PREFIX = {"f": 1e-15, "p": 1e-12, "n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
NUMBER = r"([0-9.]+(?:e[-+]?\d+)?) ([fpnumkMGT]?)"


def printed(text: str, pattern: str) -> tuple[str, float]:
    """The number `pattern` (a regex with NUMBER's two groups) finds in `text`: its digits as printed, and
    its prefix's scale."""
    match = re.search(pattern, text)
    assert match, (pattern, text)
    return match.group(1), PREFIX[match.group(2)]


def near(found: tuple[str, float], derived: float) -> None:
    """Printed to 3-4 significant digits: the derivation within half a unit of the last digit printed."""
    digits, scale = found
    mantissa = float(digits)
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    assert abs(mantissa - derived / scale) <= 0.5 * 10.0 ** -decimals * (1 + 1e-9), (digits, scale, derived)


# aoc-projected slow: its noise budget over 2048 channels takes about 30 s. A 4 ns round trip puts aoc48's DAC
# (one conversion a round trip: 250 MS/s) above the 100 MS/s knee, so that max(1, f / f_knee) counts too.
@pytest.mark.parametrize(("device", "overrides"), [("aoc48", {}), ("aoc48", {"loop.round_trip_s": 4e-9}),
                                                   pytest.param("aoc-projected", {}, marks=pytest.mark.slow)])
def test_devices_show_prints_the_derived_budget(device: str, overrides: dict) -> None:
    from click.testing import CliRunner

    from aocsim.cli import main

    profile = load_device(device, overrides)
    values, n = profile.values, int(profile.channels)
    sets = [arg for key, value in overrides.items() for arg in ("--set", f"{key}={value}")]
    result = CliRunner().invoke(main, ["devices", "show", device, *sets])
    assert result.exit_code == 0, result.output
    text = result.output
    near(printed(text, NUMBER + r"W optical per emitter"), emitter_power_w(values, n))
    near(printed(text, r"DAC .*?, " + NUMBER + r"J per conversion"), conversion_energy_j(values, "dac"))
    near(printed(text, r"ADC .*?, " + NUMBER + r"J per conversion"), conversion_energy_j(values, "adc"))
    near(printed(text, r"a tile pass " + NUMBER + "s"), pass_time_s(values))
    near(printed(text, NUMBER + r"s latency per product"), product_latency_s(values))
    power = static_power_w(values, n)
    near(printed(text, r"static power emitters " + NUMBER + "W"), power["emitters"])
    near(printed(text, r"static power .*?SLM " + NUMBER + "W"), power["slm"])
    near(printed(text, r"static power .*?detectors \+ TIA " + NUMBER + "W"), power["detectors_tia"])
    near(printed(text, r"static power .*?: " + NUMBER + "W"), sum(power.values()))
    near(printed(text, r"efficiency +" + NUMBER + r"OPS/W at"), loop_tops_per_watt(values, n) * 1e12)
    near(printed(text, r"efficiency +" + NUMBER + r"OPS/W with the loop running"), loop_tops_per_watt(values, n) * 1e12)
    its = int(re.search(r"for (\d+) iterations \(", text).group(1))
    m = values["readout.sample_interval_iterations"]
    for rule, cost in (("readout stop", native_readout_window(values, n)),
                       # devices show's nominal solve of `its` iterations reads the samples that cover them
                       ("early stop", native_early_stop(values, n, math.ceil(its / m) * m))):
        line = next(row for row in text.splitlines() if row.strip().startswith("inference") and rule in row)
        act = {**{k: float(v) for k, v in cost.items()}, "weight_loads": 0.0}
        act["busy_s"] = act["time_s"]
        energy = float(energy_components(values, n, 1, act)["total"])
        near(printed(line, r"inference +" + NUMBER + "s,"), act["time_s"])
        near(printed(line, r"s, " + NUMBER + "J,"), energy)
        near(printed(line, r"J, " + NUMBER + "OPS/W"), inference_tops_per_watt(n, its, energy) * 1e12)
        assert f"({int(act['dac_conversions'])} DAC + {int(act['adc_conversions'])} ADC conversions" in line
        if rule == "readout stop":
            near(printed(text, r"; " + NUMBER + r"OPS/W for one inference"), inference_tops_per_watt(n, its, energy) * 1e12)
