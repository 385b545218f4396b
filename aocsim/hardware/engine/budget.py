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
import warnings
from dataclasses import dataclass

import torch

from aocsim.hardware.engine.load_light import NegativeLightWarning
from aocsim.hardware.engine.loop import OpticalLoop
from aocsim.hardware.physics import sources
from aocsim.hardware.physics.hold import Hold
from aocsim.hardware.physics.noise import detector_light_w
from aocsim.hardware.profiles.parts import Parts
from aocsim.hardware.profiles.profile import DeviceProfile
from aocsim.hardware.engine.step import detector_signals, led_signals, node_noise_variance, nonlinearity
from aocsim.hardware.physics.sources import without_noise

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
    return BudgetRow(source, when, std, *sources.std_to_snr(std, amplitude))


def _reference(profile: DeviceProfile) -> tuple[torch.Tensor, torch.Tensor, int]:
    n = profile.channels or 48
    w = torch.rand(n, n, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 2 - 1
    z = 0.3 * torch.randn(REFERENCE_BATCH, n, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    return w, z, n


def _amplitude(profile: DeviceProfile) -> float:
    v = profile.parts
    rng = v.injection.clip if v.injection.clip is not None else v.readout.range_v
    return float(rng[1] - rng[0]) / 2


def _static_rms(profile: DeviceProfile, source: sources.Source, w: torch.Tensor, z: torch.Tensor) -> float:
    """rms change of the optical term when only this static source is switched on."""
    base_profile = without_noise(profile, static=True).with_overrides({"slm.bits": None})
    keep = {k: profile[k] for k in source.keys if k in profile.values}
    if source is sources.PROGRAMMING:
        keep["slm.bits"] = profile.parts.slm.bits
    with warnings.catch_warnings():  # the reference load's short light is reported by `reference_light`
        warnings.simplefilter("ignore", NegativeLightWarning)
        base = OpticalLoop(base_profile, w, alpha=REFERENCE_ALPHA, beta=REFERENCE_BETA)
        with_effect = OpticalLoop(base_profile.with_overrides(keep), w, alpha=REFERENCE_ALPHA, beta=REFERENCE_BETA,
                                  generator=2)
    return float((with_effect.optical(z) - base.optical(z)).pow(2).mean().sqrt())


def _per_iteration_std(source: sources.Source, v: Parts, loop: OpticalLoop, z: torch.Tensor
                       ) -> torch.Tensor:
    """Per channel and state, the std this per-iteration source (settings v) adds at the loop node [B, N]."""
    c = loop.constants()
    t = nonlinearity(z, c.sigmoid, loop.parts.nonlinearity.kind == "tanh")
    if isinstance(source, sources.DetectorSource):
        a, b = source.variance_coefficients(v)
        return node_noise_variance(t, c, REFERENCE_BETA, a, 2 * b, 0.0).sqrt()
    return node_noise_variance(t, c, REFERENCE_BETA, 0.0, 0.0, sources.rin_std(v.noise)).sqrt()


def _converter_std(profile: DeviceProfile, source: sources.Source) -> float:
    v = profile.parts
    if source is sources.DAC:
        return float(v.injection.clip[1] - v.injection.clip[0]) / (2 ** v.injection.dac_bits - 1) / math.sqrt(12)
    lsb = float(v.readout.range_v[1] - v.readout.range_v[0]) / (2 ** v.readout.adc_bits - 1)
    return lsb / math.sqrt(12) / math.sqrt(v.readout.samples)


def _at_bias(v: Parts, loop: OpticalLoop) -> Parts:
    """The profile's components with the reference load's bias (its own where noise.bias_units is auto)."""
    return v.map_leaves(("noise.bias_units",), lambda key, value: loop.load_parts.noise.bias_units)


def _reference_loop(profile: DeviceProfile, w: torch.Tensor) -> OpticalLoop:
    """The noise-free loop of the reference load. Its light is not warned of: `reference_light` reports the share
    of detectors it leaves short (`ReferenceLight.negative`; `aocsim devices show` prints it)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NegativeLightWarning)
        return OpticalLoop(without_noise(profile), w, alpha=REFERENCE_ALPHA, beta=REFERENCE_BETA, generator=2)


def noise_budget(profile: DeviceProfile) -> list[BudgetRow]:
    """Rows for every enabled source (`aocsim.hardware.physics.sources.SOURCES`), then `total (per iteration)`."""
    v = profile.parts
    w, z, n = _reference(profile)
    amp = _amplitude(profile)
    loop = _reference_loop(profile, w)
    rows: list[BudgetRow] = []
    per_iteration_var = 0.0
    at_bias = _at_bias(v, loop)
    for source in sources.SOURCES:
        if not source.enabled(v):
            continue
        if source.when == sources.PER_ITERATION:
            std = _per_iteration_std(source, at_bias, loop, z)
            rows.append(_row(source.label(v), source.when, float(std.median()), amp))
            per_iteration_var += float(std.pow(2).mean())
        elif source in (sources.DAC, sources.ADC):
            rows.append(_row(source.label(v), source.when, _converter_std(profile, source), amp))
        elif source is sources.HOLD:  # one sampling of an analog partial sum (tiled products only)
            rows.append(_row(source.label(v), source.when, Hold.of(v).noise_std_v, amp))
        elif source is sources.DRIFT:
            rows.append(_row(source.label(v), source.when, v.drift.offset_std_v_per_inference, amp))
        else:
            rows.append(_row(source.label(v), source.when, _static_rms(profile, source, w, z), amp))
    rows.append(_row("total (per iteration)", sources.PER_ITERATION, math.sqrt(per_iteration_var), amp))
    return rows


@dataclass(frozen=True)
class ReferenceLight:
    """The light on the detectors at the budget's reference point (`noise.detector_light_w` of each path's signal).

    mean_w: mean light on one detector, W (the bias light plus the signals' mean).
    bias_w: the bias light P_unit bias_units, W (the reference load's own with `auto`).
    negative: fraction of detector readings (both paths, every channel and state) whose light would be
        negative, D < -bias_units: the bias is too small for the signal there.
    parts: the reference load's components (`OpticalLoop.load_parts`: its bias resolved).
    """

    mean_w: float
    bias_w: float
    negative: float
    parts: Parts


def reference_light(profile: DeviceProfile) -> ReferenceLight:
    """The detectors' light at the reference operating point of this module (docs/PHYSICS.md section 3)."""
    w, z, _ = _reference(profile)
    loop = _reference_loop(profile, w)
    c = loop.constants()
    t = nonlinearity(z, c.sigmoid, loop.parts.nonlinearity.kind == "tanh")
    led = led_signals(t, c.led_coefficients, constant=True)
    at_bias = _at_bias(profile.parts, loop)
    light = detector_light_w(torch.cat(detector_signals(led, c.det_t, c.det_offset), dim=-1), at_bias.noise)
    return ReferenceLight(float(light.mean()), detector_light_w(0.0, at_bias.noise), float((light < 0).double().mean()),
                          at_bias)


def format_budget(rows: list[BudgetRow]) -> str:
    """A fixed-width table of the budget (4 significant digits), with a note when noise swamps the signal."""
    lines = [f"{'source':44s} {'drawn':14s} {'std (mV)':>10s} {'SNR (dB)':>9s} {'ENOB':>6s}"]
    for r in rows:
        snr = "inf" if math.isinf(r.snr_db) else f"{r.snr_db:9.1f}"
        enob = "inf" if math.isinf(r.enob) else f"{r.enob:6.1f}"
        lines.append(f"{r.source:44s} {r.when:14s} {r.std_v * 1e3:10.4g} {snr:>9s} {enob:>6s}")
    swamped = [r.source for r in rows if r.snr_db < 0]
    if swamped:
        lines.append(f"note: {', '.join(swamped)} exceed the full-scale signal (SNR < 0 dB): with these settings "
                     "the loop computes noise; check the noise.* and precision settings")
    return "\n".join(lines)
