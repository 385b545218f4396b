"""Convert a calibration file of the published AOC digital twin into an aocsim profile.

The twin (github microsoft/aoc, MIT licence) stores one YAML per machine
(`aoc48-2025-04.yaml`, `aoc16-2024-06.yaml`). This maps its keys onto the
aocsim schema (docs/PHYSICS.md section 2 says which key feeds which stage). Keys the
twin's loop does not use (pd_offset, best_to_worst_channels, open_loop_*,
readout_*, the saturation piecewise fits) are not carried over, except the two
rail values.
"""

from __future__ import annotations

from typing import Any

# Constants of the twin that are not in its files (docs/PHYSICS.md section 2).
OUTPUT_EFFICIENCY_16 = (0.65, 1.0)  # o+, o- of the 16-variable machine
PBS16_SCALES = (0.04, 0.06)
ROUND_TRIP_S = 20e-9  # AOC paper: about 20 ns per loop iteration
RELOAD_TIME_S = 5e-3  # assumption: a nematic LCoS panel's new pattern written and settled (devices/aoc48-twin.yaml)
WRITE_ENERGY_PER_BIT_J = 1e-11  # assumption: 10 pJ per bit written over the display interface
# The lab machines' energy figures (docs/PHYSICS.md section 6). None is in the twin's files: each is a
# literature figure or an assumption, with its source commented in devices/aoc48-twin.yaml.
LAB_ENERGY: dict[str, Any] = {
    "emitter_wall_plug_efficiency": 0.05,
    "optical_link_efficiency": 0.1,
    "detector_tia_power_w": 0.05,
    "slm_power_w": 2.0,
    "dac_energy_j": 1e-11,
    "adc_energy_j": 1e-11,
    "converter_knee_hz": 1e8,
    "idle_power_fraction": 0.1,
    "digital_energy_per_op_j": 1e-12,
    "precision_bits": 9,
    "converts_every_round_trip": False,
}

# The lab machines' converters and digital stage (assumptions, commented in devices/aoc48-twin.yaml): one ADC
# per channel at the readout's 6.25 MS/s, 50 MS/s injection DACs, a 200 MHz FPGA between products.
LAB_CONVERTERS: dict[str, dict[str, Any]] = {
    "injection": {"dac_interval_iterations": 1, "dacs_per_channel": 1},
    "readout": {"adcs_per_channel": 1, "digital_latency_s": 1e-7},
}


def _first(value: Any) -> float:
    while isinstance(value, (list, tuple)):
        value = value[0]
    return float(value)


def twin_profile(cal: dict[str, Any], *, name: str, description: str, date: str) -> dict[str, Any]:
    """A complete, deterministic aocsim profile (nested dict) from a twin calibration mapping."""
    n = len(cal["row_profiles"]["positive_row12"])
    pd, pbs = cal["pd_crosstalk"], cal["pbs_crosstalk"]
    is48 = "output_correction" in cal
    coeffs = [float(c) for c in cal["tanh_sigmoid_coeffs"]]
    cl = cal.get("close_loop_offset_and_scale")
    sat = cal["saturation"]
    return {
        "name": name,
        "description": description,
        "provenance": {
            "source": "AOC digital twin calibration (github microsoft/aoc), "
                      "Nature 2025 doi 10.1038/s41586-025-09430-z",
            "date": date,
            "licence": "MIT, Copyright (c) Microsoft Corporation",
        },
        "channels": n,
        "loop": {"round_trip_s": ROUND_TRIP_S, "bandwidth_hz": None},
        "nonlinearity": {"kind": "algebraic_sigmoid", "coeffs": coeffs},
        "emitter": {
            "poly_pos": [float(c) for c in cal["led_poly_coeffs_pos"]],
            "poly_neg": [float(c) for c in cal["led_poly_coeffs_neg"]],
            "cubic_spread": 0.0,
            "fan_in_pos": [float(c) for c in cal["row_profiles"]["positive_row12"]],
            "fan_in_neg": [float(c) for c in cal["row_profiles"]["negative_row12"]],
        },
        "slm": {
            "distortion_pos": [[float(c) for c in row] for row in cal["column_wise_weights_distortion"]["positive_row12"]],
            "distortion_neg": [[float(c) for c in row] for row in cal["column_wise_weights_distortion"]["negative_row12"]],
            "bits": None,
            "programming_error_levels": 0.0,
            "reload_time_s": RELOAD_TIME_S,
        },
        "detector": {
            "output_pos": [float(c) for c in cal["output_correction"]["positive"]] if is48 else OUTPUT_EFFICIENCY_16[0],
            "output_neg": [float(c) for c in cal["output_correction"]["negative"]] if is48 else OUTPUT_EFFICIENCY_16[1],
        },
        "crosstalk": {
            "order": "tia_pbs_pd" if is48 else "tia_pd_pbs",
            "pd": {
                "later_pos": [float(c) for c in pd["ratio_to_later_positive_row12"]],
                "later_neg": [float(c) for c in pd["ratio_to_later_negative_row12"]],
                "earlier_pos": [float(c) for c in pd["ratio_to_earlier_positive_row12"]],
                "earlier_neg": [float(c) for c in pd["ratio_to_earlier_negative_row12"]],
            },
            "pbs": {
                "enabled": False,
                "model": "per_channel" if is48 else "mirrored_poly",
                "negative_to_positive": [float(c) for c in pbs["negative_to_positive"]] if is48 else None,
                "positive_to_negative": [float(c) for c in pbs["positive_to_negative"]] if is48 else None,
                "poly_pos": None if is48 else [[float(c) for c in r] for r in pbs["poly_coeffs_positive_row12"]],
                "poly_neg": None if is48 else [[float(c) for c in r] for r in pbs["poly_coeffs_negative_row12"]],
                "scale_pos": None if is48 else PBS16_SCALES[0],
                "scale_neg": None if is48 else PBS16_SCALES[1],
            },
        },
        "closed_loop": {
            "enabled": cl is not None,
            "solution_to_adc_ratio": _first(cl["solution_to_adc_ratio"]) if cl else None,
            "dc_offset": [float(c) for c in cl["dc_offset"]] if cl else None,
            "linear_offset": [float(c) for c in cl["linear_offset"]] if cl else None,
            "scaling": [float(c) for c in cl["scaling"]] if cl else None,
        },
        "injection": {"clip": [float(c) for c in cal["deq_input_min_max"]], "dac_bits": None,
                      **LAB_CONVERTERS["injection"]},
        "saturation": {"enabled": False, "low_v": _first(sat["negative_saturation"]),
                       "high_v": _first(sat["positive_saturation"])},
        "noise": {
            "bandwidth_hz": 50e6,
            "multiplier": 1.0,
            "power_per_unit_w": 1e-4,
            "bias_units": 1.0,
            "responsivity_a_per_w": 0.4,
            "shot": {"enabled": False},
            "thermal": {"enabled": False, "feedback_resistance_ohm": 1e4, "temperature_k": 300.0},
            "rin": {"enabled": False, "rin_db_per_hz": -140.0},
            "dark": {"enabled": False, "current_a": 1e-9, "relative_spread": 0.3},
        },
        "variation": {"enabled": False, "relative_std": 0.0, "chip_seed": 0},
        "drift": {"enabled": False, "gain_std_per_inference": 0.0, "offset_std_v_per_inference": 0.0,
                  "cubic_std_per_inference": 0.0},
        "elementwise": {"gain_std": 0.0, "offset_std": 0.0, "shape_std": 0.0, "noise_std": 0.0},
        "readout": {"adc_bits": None, "range_v": [-2.5, 2.5], "samples": 40, "settle_iterations": 125,
                    "sample_interval_iterations": 8, "hold_capacitance_f": None, "hold_leakage_a": 0.0,
                    "hold_injection_c": 0.0, "hold_injection_c_per_v": 0.0,
                    **LAB_CONVERTERS["readout"]},
        "environment": {"temperature_delta_k": 0.0, "function_gain_per_k": 0.0, "loop_gain_per_k": 0.0,
                        "led_cubic_per_k": 0.0, "hold_leakage_per_k": 0.0},
        # a weight load writes both panels' N x N pixels at 9 bits
        "energy": {**LAB_ENERGY, "slm_reload_energy_j": 2 * n * n * 9 * WRITE_ENERGY_PER_BIT_J},
    }
