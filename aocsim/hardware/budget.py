"""The noise budget of a device profile: what each source costs at the loop node.

Evaluated at a documented reference operating point: weights W uniform in
[-1, 1] (seed 0), states z ~ N(0, 0.3^2) (seed 1, 256 samples), the
normalized gain with beta = 18.6 (the twin's initial value) and alpha = 0.5.
Per source: the standard deviation it adds to the loop node (volts; the median
over channels and states), the SNR against a full-scale sine of amplitude A
(half the injection clip range, 1.3 V on both machines), and the effective bits
ENOB = (SNR_dB - 1.76) / 6.02. Per-iteration sources combine into the total.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from aocsim.hardware import components as C
from aocsim.hardware.loop import OpticalLoop
from aocsim.hardware.noise import detector_noise_std
from aocsim.hardware.profile import DeviceProfile

REFERENCE_BETA, REFERENCE_ALPHA, REFERENCE_BATCH = 18.6, 0.5, 256


@dataclass(frozen=True)
class BudgetRow:
    """One noise source: when it is drawn and what it costs."""

    source: str
    when: str  # "per iteration", "static", "per readout", "per inference"
    std_v: float
    snr_db: float
    enob: float


def _row(source: str, when: str, std: float, amplitude: float) -> BudgetRow:
    snr = math.inf if std == 0 else 20 * math.log10(amplitude / math.sqrt(2) / std)
    return BudgetRow(source, when, std, snr, (snr - 1.76) / 6.02)


def _reference(profile: DeviceProfile) -> tuple[torch.Tensor, torch.Tensor, int]:
    n = profile.channels or 48
    w = torch.rand(n, n, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 2 - 1
    z = 0.3 * torch.randn(REFERENCE_BATCH, n, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    return w, z, n


def _amplitude(profile: DeviceProfile) -> float:
    rng = profile["injection.clip"] if profile["injection.clip"] is not None else profile["readout.range_v"]
    return float(rng[1] - rng[0]) / 2


def _static_rms(profile: DeviceProfile, key_overrides: dict, w: torch.Tensor, z: torch.Tensor) -> float:
    """rms change of the optical term when only the given static effect is switched on."""
    off = {"slm.bits": None, "slm.programming_error_levels": 0.0, "variation.enabled": False,
           "noise.shot.enabled": False, "noise.thermal.enabled": False, "noise.rin.enabled": False}
    base = OpticalLoop(profile.with_overrides(off), w, alpha=REFERENCE_ALPHA, beta=REFERENCE_BETA)
    with_effect = OpticalLoop(profile.with_overrides({**off, **key_overrides}), w, alpha=REFERENCE_ALPHA,
                              beta=REFERENCE_BETA, generator=torch.Generator().manual_seed(2))
    return float((with_effect.optical(z) - base.optical(z)).pow(2).mean().sqrt())


def noise_budget(profile: DeviceProfile) -> list[BudgetRow]:
    """Rows for every enabled source, then `total (per iteration)`."""
    v = profile.values
    w, z, n = _reference(profile)
    amp = _amplitude(profile)
    quiet = profile.with_overrides({"noise.shot.enabled": False, "noise.thermal.enabled": False,
                                    "noise.rin.enabled": False})
    loop = OpticalLoop(quiet, w, alpha=REFERENCE_ALPHA, beta=REFERENCE_BETA,
                       generator=torch.Generator().manual_seed(2))
    o = loop.optics
    u = C.led_pair(loop._nonlinear(z), loop.poly_pos_f, loop.poly_neg_f)  # LED signals [B, 2N]
    d = u @ o.m_det.T + o.c_det
    to_node = (REFERENCE_BETA * o.scaling * o.gain_scale).abs()  # detector units -> loop volts
    rows: list[BudgetRow] = []
    per_iteration_var = 0.0
    for source, key in (("shot noise", "noise.shot.enabled"), ("thermal (TIA) noise", "noise.thermal.enabled")):
        if v[key]:
            other = "noise.thermal.enabled" if key == "noise.shot.enabled" else "noise.shot.enabled"
            std_d = detector_noise_std(d, {**v, other: False})
            std = to_node * torch.sqrt(std_d[:, :n] ** 2 + std_d[:, n:] ** 2)
            rows.append(_row(source, "per iteration", float(std.median()), amp))
            per_iteration_var += float(std.pow(2).mean())
    if v["noise.rin.enabled"]:
        noisy = OpticalLoop(profile.with_overrides({"noise.rin.enabled": True}), w, alpha=REFERENCE_ALPHA,
                            beta=REFERENCE_BETA, generator=torch.Generator().manual_seed(2))
        # y_j = g sum_i (K[j, i] p_i + K[j, N + i] q_i)(1 + eps_i): LED i contributes c_ji eps_i.
        contrib = REFERENCE_BETA * (o.k[None, :, :n] * u[:, None, :n] + o.k[None, :, n:] * u[:, None, n:])
        std = noisy.rin_std * contrib.pow(2).sum(-1).sqrt()
        rows.append(_row("LED RIN", "per iteration", float(std.median()), amp))
        per_iteration_var += float(std.pow(2).mean())
    if v["slm.bits"] is not None:
        rows.append(_row(f"SLM quantisation ({v['slm.bits']} bits)", "static",
                         _static_rms(profile, {"slm.bits": v["slm.bits"]}, w, z), amp))
    if v["slm.programming_error_levels"] > 0:
        rows.append(_row("SLM programming error", "static", _static_rms(
            profile, {"slm.bits": v["slm.bits"], "slm.programming_error_levels": v["slm.programming_error_levels"]},
            w, z), amp))
    if v["variation.enabled"] and v["variation.relative_std"] > 0:
        rows.append(_row("chip-to-chip variation", "static",
                         _static_rms(profile, {"variation.enabled": True}, w, z), amp))
    if v["injection.dac_bits"] is not None and v["injection.clip"] is not None:
        lsb = float(v["injection.clip"][1] - v["injection.clip"][0]) / (2 ** v["injection.dac_bits"] - 1)
        rows.append(_row(f"injection DAC ({v['injection.dac_bits']} bits)", "static", lsb / math.sqrt(12), amp))
    if v["readout.adc_bits"] is not None:
        lsb = float(v["readout.range_v"][1] - v["readout.range_v"][0]) / (2 ** v["readout.adc_bits"] - 1)
        rows.append(_row(f"readout ADC ({v['readout.adc_bits']} bits, mean of {v['readout.samples']})",
                         "per readout", lsb / math.sqrt(12) / math.sqrt(v["readout.samples"]), amp))
    if v["drift.enabled"]:
        rows.append(_row("drift (offset step)", "per inference", v["drift.offset_std_v_per_inference"], amp))
    rows.append(_row("total (per iteration)", "per iteration", math.sqrt(per_iteration_var), amp))
    return rows


def format_budget(rows: list[BudgetRow]) -> str:
    """A fixed-width table of the budget."""
    lines = [f"{'source':44s} {'drawn':14s} {'std (mV)':>10s} {'SNR (dB)':>9s} {'ENOB':>6s}"]
    for r in rows:
        snr = "inf" if math.isinf(r.snr_db) else f"{r.snr_db:9.1f}"
        enob = "inf" if math.isinf(r.enob) else f"{r.enob:6.1f}"
        lines.append(f"{r.source:44s} {r.when:14s} {r.std_v * 1e3:10.4f} {snr:>9s} {enob:>6s}")
    return "\n".join(lines)
