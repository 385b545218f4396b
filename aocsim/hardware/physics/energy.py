"""Time and energy per inference, and TOPS/W, of a device profile (docs/PHYSICS.md section 6).

A pure model over the profile's `energy` section: static powers times the time an inference
keeps the machine busy, plus per-conversion energies times the conversions it makes.

    P_emit   = 2 N P_unit d / eta_link             optical power of one emitter (2N pixels lit)
    P_static = N (P_emit / eta_wpe + P_det_tia) + P_slm   per module
    E        = modules P_static t + n_dac E_dac + n_adc E_adc + n_ops E_op + n_loads E_load

with P_unit d the light on each SLM pixel at the emitters' bias drive d and eta_link the optics before the
SLM planes (`aocsim.hardware.physics.light`: the SLM's transmission is the detectors' bias light, counted
there once). What an inference does (`Activity`) is recorded by the engine and the placed
models that do the work; `tops_per_watt` is the machine running its loop continuously,
`inference_tops_per_watt` the useful work of one inference. Everything broadcasts over numpy
arrays (per-sample iterations, say).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from aocsim._checks import integer, short
from aocsim.errors import InputError
from aocsim.hardware.physics import sources
from aocsim.hardware.physics.converters import conversion_energy_j, converter_lines, pass_time_s, step_energy_ratio
from aocsim.hardware.physics.light import emitter_light_w, led_bias_units
from aocsim.hardware.profiles.parts import Parts
from aocsim.hardware.profiles.profile import DeviceProfile
from aocsim.units import ops_per_watt, si

Number = Union[int, float, np.ndarray]
STATIC = ("emitters", "slm", "detectors_tia")  # the components `static_power_w` prices
COMPONENTS = (*STATIC, "dac", "adc", "digital")


def _counts(value: Any, name: str) -> Number:
    """A non-negative finite number or array of them (what an Activity counts)."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{name} = {short(value)}; expected numbers >= 0") from None
    if isinstance(value, (bool, np.bool_)) or not np.isfinite(arr).all() or (arr < 0).any():
        raise InputError(f"{name} = {short(value)}; expected finite numbers >= 0")
    return value if isinstance(value, (int, float)) else arr


@dataclass(frozen=True)
class Activity:
    """What the machine did for one inference (or one token): numbers, or numpy arrays that broadcast.

    Recorded by the code that does the work (the loop's solve, a tile pass, a placed model's run;
    docs/ARCHITECTURE.md) and priced once by `energy_j`. Activities add (`a + b`: both happened)
    and scale (`k * a`: k repetitions, k a number or an array).

    Attributes:
        time_s: time the machine is busy (its static powers are drawn that long), s.
        dac_conversions: DAC conversions (inputs driven onto the emitters).
        adc_conversions: ADC conversions (node readings).
        digital_ops: digital operations on converted values (readout averaging, digital partial
            sums, averaged tile passes).
        round_trips: loop iterations and tile passes (one round trip each).
        weight_loads: SLM weight patterns loaded during this inference (a time-multiplexed module's
            reloads; `time_s` includes their `slm.reload_time_s`).
        busy_s: module-seconds during which a module runs a pass (its emitters lit, its electronics
            active); the rest of `modules x time_s` its emitters and electronics idle at
            `energy.idle_power_fraction` of their power. None: every powered module busy all along
            (the AOC's loop runs the whole time).
        channels: channels lit; None = the profile's channel count.
        modules: optical modules powered for the whole `time_s` (each with its emitters, SLMs,
            detectors and electronics); None = one. Adding two activities of one machine keeps the
            larger count (a placement with parts on separate modules sets its own total).
    """

    time_s: Number
    dac_conversions: Number = 0
    adc_conversions: Number = 0
    digital_ops: Number = 0
    round_trips: Number = 0
    weight_loads: Number = 0
    channels: int | None = None
    modules: int | None = None
    busy_s: Number | None = None

    def __post_init__(self) -> None:
        if self.busy_s is None:
            object.__setattr__(self, "busy_s", (self.modules or 1) * self.time_s)
        for name in COUNTS:
            object.__setattr__(self, name, _counts(getattr(self, name), f"Activity.{name}"))
        if self.channels is not None:
            object.__setattr__(self, "channels", integer(self.channels, "Activity.channels", minimum=1))
        if self.modules is not None:
            object.__setattr__(self, "modules", integer(self.modules, "Activity.modules", minimum=1))

    def __add__(self, other: "Activity") -> "Activity":
        if not isinstance(other, Activity):
            return NotImplemented
        lit = [c for c in (self.channels, other.channels) if c is not None]
        powered = [m for m in (self.modules, other.modules) if m is not None]
        return Activity(**{n: getattr(self, n) + getattr(other, n) for n in COUNTS},
                        channels=max(lit) if lit else None, modules=max(powered) if powered else None)

    def __mul__(self, k: Number) -> "Activity":
        return Activity(**{n: getattr(self, n) * _counts(k, "repetitions") for n in COUNTS}, channels=self.channels,
                        modules=self.modules)

    __rmul__ = __mul__


COUNTS = ("time_s", "dac_conversions", "adc_conversions", "digital_ops", "round_trips", "weight_loads", "busy_s")


def load_shares(evaluations: np.ndarray) -> np.ndarray:
    """[B, L]: each sequence's share of the weight loads of the products it took part in, per token: the
    B sequences run each token together, the k-th product of token t among the sequences still
    iterating there (a sequence that stopped takes no more part), so a sequence pays 1 / (how many took
    part) of each of its `evaluations[b, t]` products' loads (docs/PHYSICS.md section 6)."""
    evals = np.asarray(evaluations, dtype=np.float64)
    steps = np.arange(int(evals.max(initial=0)))
    taking = steps[None, None, :] < evals[..., None]  # [B, L, E]: sequence b in the k-th product of token t
    count = taking.sum(0, keepdims=True)
    return (taking / np.maximum(count, 1)).sum(-1)


def _channels(profile: DeviceProfile, channels: int | None, where: str) -> int:
    if channels is not None:
        return integer(channels, f"{where}: channels", minimum=1)
    if profile.channels is None:
        raise InputError(f"{where}: profile {profile.name!r} has no fixed channel count (channels: null); "
                         f"pass channels=N")
    return int(profile.channels)


def emitter_optical_power_w(profile: DeviceProfile, channels: int | None = None) -> float:
    """Mean optical power of one emitter of N, W: 2 N P_unit d / eta_link (docs/PHYSICS.md section 6;
    `aocsim.hardware.physics.light.emitter_light_w`): the light of the 2N pixels it lights at its bias."""
    return emitter_light_w(profile.parts, _channels(profile, channels, "emitter_optical_power_w"))


def static_power_w(profile: DeviceProfile, channels: int | None = None) -> dict[str, float]:
    """Static electrical power per component, W: emitters, slm, detectors_tia (N channels lit)."""
    v = profile.parts
    n = _channels(profile, channels, "static_power_w")
    return {
        "emitters": n * emitter_optical_power_w(profile, n) / v.energy.emitter_wall_plug_efficiency,
        "slm": float(v.energy.slm_power_w),
        "detectors_tia": n * float(v.energy.detector_tia_power_w),
    }


def energy_j(profile: DeviceProfile, activity: Activity) -> dict[str, Number]:
    """Energy of one inference per component (emitters, slm, detectors_tia, dac, adc, digital) and "total", J.

    Every powered module's static powers (`static_power_w`) times `activity.time_s`, plus conversions,
    digital operations and weight loads (in "slm") times their energies (docs/PHYSICS.md section 6).
    """
    if not isinstance(activity, Activity):
        raise InputError(f"activity = {short(activity)}; expected an aocsim.hardware.physics.energy.Activity")
    v = profile.parts
    if activity.channels is None and profile.channels is None and not np.any(np.asarray(activity.time_s) > 0):
        power = dict.fromkeys(STATIC, 0.0)  # nothing ran on the optics: none powered
    else:
        power = static_power_w(profile, activity.channels)
    modules = activity.modules or 1
    # emitters and electronics at full power while a module runs a pass, at the idle fraction otherwise;
    # the SLMs hold their pattern (and draw their power) all along
    idle = np.maximum(modules * np.asarray(activity.time_s, dtype=np.float64) - activity.busy_s, 0.0)
    lit = activity.busy_s + float(v.energy.idle_power_fraction) * idle
    out: dict[str, Number] = {name: (modules * p * activity.time_s if name == "slm" else p * lit)
                              for name, p in power.items()}
    out["slm"] = out["slm"] + activity.weight_loads * v.energy.slm_reload_energy_j
    out["dac"] = activity.dac_conversions * conversion_energy_j(v, "dac")
    out["adc"] = activity.adc_conversions * conversion_energy_j(v, "adc")
    out["digital"] = activity.digital_ops * v.energy.digital_energy_per_op_j
    out["total"] = sum(out[name] for name in COMPONENTS)
    return out


def light_scale(parts: Parts, bits_change: float) -> float:
    """Factor k on the light (`noise.power_per_unit_w`) that moves the detector noise by `bits_change` bits.

    At the bias light, in detector units, the shot noise's variance falls as 1 / k and the thermal and
    dark-current shot noise's as 1 / k^2 (their currents stay); with s the shot share of the variance now,
    s / k + (1 - s) / k^2 = 4^-d for d bits (6.02 dB per bit), so k = (s + sqrt(s^2 + 4 (1 - s) 4^-d)) / (2 4^-d):
    4^d when shot noise dominates, 2^d when the currents' noise does. Without detector noise, 4^d
    (shot-noise-limited light, the sizing convention).
    """
    s, r = shot_share(parts), 4.0 ** -bits_change
    return (s + math.sqrt(s * s + 4.0 * (1.0 - s) * r)) / (2.0 * r)


def shot_share(parts: Parts) -> float:
    """Shot noise's share of the detector variance at the bias light (1 without detector noise)."""
    shot = sources.SHOT.variance_coefficients(parts)[1]
    total = sum(s.variance_coefficients(parts)[1] for s in sources.DETECTOR_SOURCES)
    return shot / total if total > 0 else 1.0


def bits_at_light(parts: Parts, k: float) -> float:
    """Change in effective bits when the light is scaled by k (the inverse of `light_scale`):
    -log2(s / k + (1 - s) / k^2) / 2, half a bit per halving of the light where shot noise dominates."""
    s = shot_share(parts)
    return -0.5 * math.log2(s / k + (1.0 - s) / k ** 2)


def at_precision(profile: DeviceProfile, bits: int) -> DeviceProfile:
    """The profile's energy figures resized from `energy.precision_bits` to `bits` (docs/PHYSICS.md section 6).

    The light (`noise.power_per_unit_w`) moves the detector noise at the bias light by the change in
    bits, thermal and dark-current noise kept (`light_scale`: x 4 per bit when shot noise dominates);
    converters become b-bit converters (`injection.dac_bits`, `readout.adc_bits` where they are set; their
    reference energies move with the precision they are quoted at by the one figure of merit that
    prices them, `converters.step_energy_ratio`). Electronics and SLM stay; the SLM's bits are set
    separately.
    """
    bits = integer(bits, "bits", minimum=1)
    v = profile.parts
    d = bits - v.energy.precision_bits
    if d == 0:
        return profile
    converters = {key: bits for key, now in (("injection.dac_bits", v.injection.dac_bits),
                                             ("readout.adc_bits", v.readout.adc_bits)) if now is not None}
    return profile.with_overrides({
        "noise.power_per_unit_w": v.noise.power_per_unit_w * light_scale(v, d),
        "energy.dac_energy_j": v.energy.dac_energy_j * step_energy_ratio(v.energy.precision_bits, bits),
        "energy.adc_energy_j": v.energy.adc_energy_j * step_energy_ratio(v.energy.precision_bits, bits),
        "energy.precision_bits": bits,
        **converters,
    })


def tops_per_watt(profile: DeviceProfile, *, bits: int | None = None, converting: bool | None = None,
                  channels: int | None = None) -> float:
    """TOPS/W of the machine running its loop continuously (docs/PHYSICS.md section 6).

    2 N^2 operations (an N x N matrix-vector product, multiply and add) per round trip, over the
    energy of one round trip: the static power (emitters, SLM, detectors and TIAs) times the round
    trip, plus, when the machine converts every round trip (`converting`, default
    `energy.converts_every_round_trip`), N DAC and N ADC conversions and N digital additions
    (a tile pass of a full N x N tile), the static power then paid for the pass's time, which the
    converters' pace sets (`converters.pass_time_s`). bits: quote at this precision (`at_precision`); None = the
    profile's `energy.precision_bits`. math.inf if a round trip costs nothing.
    """
    if bits is not None:
        profile = at_precision(profile, bits)
    n = _channels(profile, channels, "tops_per_watt")
    if converting is None:
        converting = bool(profile.parts.energy.converts_every_round_trip)
    # one round trip of the loop; converting: a tile pass of a full N x N tile, N values in through the DACs,
    # N out through the ADCs and N digital additions, at the converters' pace (`pass_time_s`)
    time_s = pass_time_s(profile.parts) if converting else float(profile.parts.loop.round_trip_s)
    activity = Activity(time_s, *((n, n, n) if converting else (0, 0, 0)), round_trips=1, channels=n)
    total = float(energy_j(profile, activity)["total"])
    return math.inf if total == 0 else 2.0 * n * n / total / 1e12


def inference_tops_per_watt(profile: DeviceProfile, inference: Activity, iterations: Number) -> Number:
    """TOPS/W of the useful work of one inference (docs/PHYSICS.md section 6): 2 N^2 operations per loop
    iteration the solve needed, over the inference's whole energy (`energy_j`: the readout window or the
    early stop's samples included). math.inf if the inference costs nothing.
    """
    n = _channels(profile, inference.channels, "inference_tops_per_watt")
    ops = 2.0 * n * n * np.asarray(_counts(iterations, "iterations"), dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        tops = ops / np.asarray(energy_j(profile, inference)["total"], dtype=np.float64) / 1e12
    return float(tops) if tops.ndim == 0 else tops


def format_inference(profile: DeviceProfile, inference: Activity, what: str, iterations: int | None = None) -> str:
    """One inference's time, energy and conversions (`what` names it), as one line; with `iterations`,
    also the TOPS/W of its useful work (`inference_tops_per_watt`)."""
    e = energy_j(profile, inference)
    tops = ("" if iterations is None else
            f", {ops_per_watt(float(inference_tops_per_watt(profile, inference, iterations)))} for {iterations} iterations")
    return (f"  inference    {si(float(inference.time_s), 's')}, {si(float(e['total']), 'J')}{tops} "
            f"({int(inference.dac_conversions)} DAC + {int(inference.adc_conversions)} ADC conversions; {what})")


def format_energy(profile: DeviceProfile) -> str:
    """The energy figures, static powers and TOPS/W, as text (`aocsim devices show`)."""
    v = profile.parts
    n = profile.channels
    lines = ["Energy (docs/PHYSICS.md section 6; figures and sources in the profile's energy section)",
             f"  emitters     wall-plug efficiency {v.energy.emitter_wall_plug_efficiency:g}, optical link "
             f"efficiency {v.energy.optical_link_efficiency:g} (before the SLMs): "
             f"{si(emitter_optical_power_w(profile, n or 1), 'W')} optical per emitter"
             f"{' per channel' if n is None else ''} (2 N P_unit d / eta, d = {led_bias_units(v):.3g} units)",
             *(f"  {'converters' if i == 0 else '':12s} {line}" for i, line in enumerate(converter_lines(v))),
             f"  digital      {si(v.energy.digital_energy_per_op_j, 'J')} per op",
             f"  weight load  {si(v.slm.reload_time_s, 's')}, {si(v.energy.slm_reload_energy_j, 'J')} (paid per "
             f"tile and product by a time-multiplexed placement; weight-stationary modules load once)"]
    per = static_power_w(profile, channels=n or 1)
    if n is None:
        lines.append(f"  static power per channel: emitters {si(per['emitters'], 'W')} x N, detectors + TIA "
                     f"{si(per['detectors_tia'], 'W')}; SLM {si(per['slm'], 'W')} (channels: null, so no "
                     f"TOPS/W)")
        return "\n".join(lines)
    lines.append(f"  static power emitters {si(per['emitters'], 'W')}, SLM {si(per['slm'], 'W')}, detectors + TIA "
                 f"{si(per['detectors_tia'], 'W')}: {si(sum(per.values()), 'W')}")
    conv = bool(v.energy.converts_every_round_trip)
    lines.append(f"  efficiency   {ops_per_watt(tops_per_watt(profile))} at {v.energy.precision_bits} bits "
                 f"(loop running, 2 N^2 ops per {si(v.loop.round_trip_s, 's')} round trip; "
                 f"{'N DAC + N ADC conversions per round trip' if conv else 'no conversions per round trip'})")
    return "\n".join(lines)
