"""The components of the light's path: loop timing, nonlinearity, emitters, SLMs, detectors, crosstalk,
closed-loop correction, injection and rails (docs/PHYSICS.md section 2; aocsim/hardware/profiles/parts.py
gathers every component)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aocsim.hardware.profiles.part import N, Part, part, spec


@dataclass(frozen=True)
class Loop(Part):
    """The loop's timing: one round trip, and the first-order bandwidth that slows each step."""

    round_trip_s: float = spec('time of one loop iteration', 's', low=0.0)
    bandwidth_hz: float | None = spec(
        'first-order loop bandwidth f_c: each iteration moves the state by a fraction 1 - exp(-2 pi f_c t_rt)'
        ' towards the new value; null = instantaneous', 'Hz', low=1e-300)


@dataclass(frozen=True)
class Nonlinearity(Part):
    """The analog nonlinearity that closes the loop (docs/PHYSICS.md section 2, step 1)."""

    kind: str = spec(
        'tanh (exact) or algebraic_sigmoid (calibrated: u = a z + b, t = d u / (1 + |u|^c)^(1/c) + f + g z)',
        choices=('tanh', 'algebraic_sigmoid'))
    coeffs: np.ndarray | None = spec(
        '[a, b, c, d, f] or [a, b, c, d, f, g] of the algebraic sigmoid (twin calibration, docs/PHYSICS.md '
        'section 2 step 1); ignored for tanh', lengths=(5, 6))


@dataclass(frozen=True)
class Emitter(Part):
    """The microLEDs: their drive cubics and the fan-in optics of each input channel."""

    poly_pos: np.ndarray = spec(
        'microLED cubic of the positive path, highest power first (twin calibration, docs/PHYSICS.md section '
        '2 step 2)', shape=(4,))
    poly_neg: np.ndarray = spec('microLED cubic of the negative path, highest power first', shape=(4,))
    cubic_spread: float = spec(
        "emitter-to-emitter relative std s of the LED cubics' t^3 and t^2 coefficients: each emitter's, per "
        "path, is the profile's times (1 + s n), n standard normal, static per chip (variation.chip_seed) and"
        ' module; predistortion then inverts what the chip measures of each emitter (docs/PHYSICS.md section '
        '3)', low=0.0, high=1.0)
    fan_in_pos: np.ndarray = spec(
        'fan-in efficiency per input channel, positive path (twin calibration, docs/PHYSICS.md section 2 step'
        ' 3)', shape=(N,), low=0.0)
    fan_in_neg: np.ndarray = spec('fan-in efficiency per input channel, negative path', shape=(N,), low=0.0)


@dataclass(frozen=True)
class Slm(Part):
    """The spatial light modulators that hold the weights: distortion, bits, programming error, reload."""

    distortion_pos: np.ndarray = spec(
        'per output column j: [A, B, C], What = A W^2 + B W + C; C is the SLM darkness (twin calibration, '
        'docs/PHYSICS.md section 2 step 4)', shape=(N, 3))
    distortion_neg: np.ndarray = spec('per output column j: [A, B, C] of the negative path', shape=(N, 3))
    bits: int | None = spec(
        'signed weight bits b: W_Q = (m/L) clamp(round(L W/m), -L-1, L), L = 2^(b-1) - 1; null = unquantised',
        low=2, high=24)
    programming_error_levels: float = spec(
        'std of the static Gaussian programming error per pixel, in quantisation levels (m / L; m / 255 when '
        'bits is null); drawn once per weight load', 'levels', low=0.0)
    reload_time_s: float = spec(
        'time to write a new weight pattern onto the SLMs and let it settle (a time-multiplexed placement '
        'pays it per weight load: docs/PHYSICS.md section 6)', 's', low=0.0, high=10.0)


@dataclass(frozen=True)
class Detector(Part):
    """The photodetectors' TIA / output efficiency of each output channel."""

    output_pos: np.ndarray = spec(
        'TIA / output efficiency per output channel, positive path (twin calibration, docs/PHYSICS.md section'
        ' 2 step 6)', shape=(N,), low=0.0)
    output_neg: np.ndarray = spec('TIA / output efficiency per output channel, negative path', shape=(N,), low=0.0)


@dataclass(frozen=True)
class DetectorCrosstalk(Part):
    """Leaks between neighbouring photodetectors, per path."""

    later_pos: np.ndarray = spec(
        'photodetector leak of channel j into j+1, positive path (twin calibration, docs/PHYSICS.md section 2'
        ' step 7)', shape=(N,), low=0.0, high=1.0)
    later_neg: np.ndarray = spec('leak of channel j into j+1, negative path', shape=(N,), low=0.0, high=1.0)
    earlier_pos: np.ndarray = spec('leak of channel j into j-1, positive path', shape=(N,), low=0.0, high=1.0)
    earlier_neg: np.ndarray = spec('leak of channel j into j-1, negative path', shape=(N,), low=0.0, high=1.0)


@dataclass(frozen=True)
class BeamSplitterCrosstalk(Part):
    """Leaks between the two paths at the polarising beam splitter."""

    enabled: bool = spec('polarising-beam-splitter leakage between the paths (off in the twin)')
    model: str = spec(
        'per_channel (48: P += o+ p n2p) or mirrored_poly (16: sign-matrix patterns)', choices=('per_channel',
        'mirrored_poly'))
    negative_to_positive: np.ndarray | None = spec('per_channel model: leak into the positive path', shape=(N,))
    positive_to_negative: np.ndarray | None = spec('per_channel model: leak into the negative path', shape=(N,))
    poly_pos: np.ndarray | None = spec('mirrored_poly model: K+ [15, 3]', shape=(15, 3))
    poly_neg: np.ndarray | None = spec('mirrored_poly model: K- [15, 3]', shape=(15, 3))
    scale_pos: float | None = spec('mirrored_poly model: divisor of the leak into P (0.04 in the twin)', low=1e-300)
    scale_neg: float | None = spec('mirrored_poly model: divisor of the leak into Q (0.06 in the twin)', low=1e-300)


@dataclass(frozen=True)
class Crosstalk(Part):
    """Crosstalk between channels and between paths, and the order of the stages."""

    order: str = spec(
        'stage order: tia_pbs_pd (48-variable machine) or tia_pd_pbs (16)', choices=('tia_pbs_pd', 'tia_pd_pbs'))
    pd: DetectorCrosstalk = part()
    pbs: BeamSplitterCrosstalk = part()


@dataclass(frozen=True)
class ClosedLoop(Part):
    """The closed-loop correction of the 48-variable machine (docs/PHYSICS.md section 2, step 10)."""

    enabled: bool = spec(
        'closed-loop correction y = (y + r (delta + g lambda)) s (twin calibration, docs/PHYSICS.md section 2'
        ' step 10)')
    solution_to_adc_ratio: float | None = spec('r')
    dc_offset: np.ndarray | None = spec('delta per channel', 'V', shape=(N,))
    linear_offset: np.ndarray | None = spec('lambda per channel (times the gain g)', 'V', shape=(N,))
    scaling: np.ndarray | None = spec('s per channel', shape=(N,))


@dataclass(frozen=True)
class Injection(Part):
    """The input injection: its clip and its DAC."""

    clip: np.ndarray | None = spec('[low, high] clip of x + b; null = no clip', 'V', shape=(2,))
    dac_bits: int | None = spec('injection DAC bits over the clip range; null = ideal', low=1, high=24)
    dac_interval_iterations: int = spec(
        "round trips per conversion of one injection DAC (its interval): a tile pass waits for its inputs' "
        'conversions (docs/PHYSICS.md section 6)', low=1)
    dacs_per_channel: int = spec(
        'DACs on each input channel, interleaved: the channel converts this many inputs per DAC interval',
        low=1)


@dataclass(frozen=True)
class Saturation(Part):
    """Rails on the loop node inside the loop."""

    enabled: bool = spec("rails on the loop node inside the loop (not in the twin's loop)")
    low_v: float = spec('lower rail', 'V')
    high_v: float = spec('upper rail', 'V')
