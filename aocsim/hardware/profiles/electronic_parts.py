"""The noise, the chip's static draws, the readout electronics and the energy figures (docs/PHYSICS.md
sections 3 and 6; aocsim/hardware/profiles/parts.py gathers every component)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aocsim.hardware.profiles.part import Part, part, spec


@dataclass(frozen=True)
class ShotNoise(Part):
    """Shot noise of the detected light."""

    enabled: bool = spec('shot noise per iteration: var(I) = 2 q I B')


@dataclass(frozen=True)
class ThermalNoise(Part):
    """Johnson noise of the TIAs."""

    enabled: bool = spec('Johnson / TIA noise per iteration: var(I) = 4 k T B / R_f')
    feedback_resistance_ohm: float = spec('TIA feedback resistance R_f', 'ohm', low=1e-300)
    temperature_k: float = spec('temperature T', 'K', low=0.0)


@dataclass(frozen=True)
class Rin(Part):
    """Relative intensity noise of the LEDs."""

    enabled: bool = spec(
        'LED relative intensity noise per iteration, multiplicative on p, q: var = 10^(RIN/10) B, one draw '
        'per LED shared by both paths')
    rin_db_per_hz: float = spec('relative intensity noise', 'dB/Hz', high=0.0)


@dataclass(frozen=True)
class DarkCurrent(Part):
    """The photodetectors' dark current: a static offset and its shot noise."""

    enabled: bool = spec(
        'photodetector dark current: an offset I_dark per detector (static, per chip) and its shot noise '
        'var(I) = 2 q I_dark B per iteration')
    current_a: float = spec('mean dark current I_dark of one photodetector', 'A', low=0.0)
    relative_spread: float = spec(
        "detector-to-detector std of I_dark relative to its mean (static per chip; the paths' offsets cancel "
        'only where their dark currents match)', low=0.0)


@dataclass(frozen=True)
class Noise(Part):
    """The light on the detectors and every per-iteration noise source (docs/PHYSICS.md section 3)."""

    bandwidth_hz: float = spec('detection bandwidth B of shot, thermal and RIN noise', 'Hz', low=1.0)
    power_per_unit_w: float = spec(
        'optical power on one photodetector per twin detector unit (assumption); bounded so that '
        'photocurrents and their squares stay finite floats', 'W', low=1e-18, high=1000.0)
    bias_units: float | str = spec(
        'light on a detector at the LED bias point, in twin detector units: the light is P_unit (bias_units +'
        ' D) for the signed signal D, its mean the bias light whose shot noise the loop draws; large enough that'
        ' no full-scale signal makes it negative (a load that needs more is warned of), or auto: each weight'
        " load's own need, the fullest column's light at the emitters' bias (docs/PHYSICS.md section 6)",
        low=0.0, choices=("auto",))
    responsivity_a_per_w: float = spec('photodetector responsivity R', 'A/W', low=1e-06, high=1000.0)
    multiplier: float = spec(
        'scales the std of every per-iteration noise source (1 = the figures above; for sensitivity studies)', low=0.0)
    shot: ShotNoise = part()
    thermal: ThermalNoise = part()
    rin: Rin = part()
    dark: DarkCurrent = part()


@dataclass(frozen=True)
class Variation(Part):
    """Chip-to-chip variation of the calibrated arrays, and which chip."""

    enabled: bool = spec(
        'chip-to-chip variation: static multiplicative perturbation (1 + s n) of every calibrated per-channel'
        ' array, drawn once per chip')
    relative_std: float = spec('s', low=0.0)
    chip_seed: int = spec('which simulated chip (seed of the static draw)', low=0)


@dataclass(frozen=True)
class Drift(Part):
    """Slow random walks across inferences."""

    enabled: bool = spec('slow random walk across inferences of the output gain and offset')
    gain_std_per_inference: float = spec('std of the relative gain step per inference', low=0.0)
    offset_std_v_per_inference: float = spec('std of the offset step per inference', 'V', low=0.0)
    cubic_std_per_inference: float = spec(
        "std of the relative step per inference of each emitter's t^3 and t^2 coefficients (a random walk of "
        'the LED cubics away from what predistortion measured); 0 = stable', low=0.0, high=1.0)


@dataclass(frozen=True)
class Elementwise(Part):
    """Analog elementwise function circuits (SiLU, softplus of an implicit SSM placed with elementwise 'analog':
    aocsim/execute/elementwise.py)."""

    gain_std: float = spec(
        'std of the static per-channel relative gain error g_c of an analog function circuit', low=0.0, high=1.0)
    offset_std: float = spec(
        "std of the static per-channel offset o_c, as a fraction of the function's full scale", low=0.0, high=1.0)
    shape_std: float = spec(
        'std of each of the static per-channel shape errors of an analog function circuit, f((1 + a_c) x + '
        'b_c): a_c scales the input axis (slope factor / input transconductance), b_c shifts the knee '
        '(threshold), in units of x; a gain-and-offset calibration cannot remove them', low=0.0, high=1.0)
    noise_std: float = spec(
        "std of the noise n of one evaluation, as a fraction of the function's full scale", low=0.0, high=1.0)


@dataclass(frozen=True)
class Readout(Part):
    """The readout: ADC, its settle window and samples, and the hold of an analog partial sum."""

    adc_bits: int | None = spec('readout ADC bits over readout.range_v; null = ideal', low=1, high=24)
    range_v: np.ndarray = spec('[low, high] ADC input range', 'V', shape=(2,))
    samples: int = spec('K samples averaged after the settle window', low=1)
    settle_iterations: int = spec('iterations before the first sample (2.5 us / 20 ns = 125)', low=0)
    sample_interval_iterations: int = spec(
        "iterations between samples (160 ns / 20 ns = 8): the ADC's interval, one conversion of its channel "
        "each; a tile pass waits for its outputs' conversions (docs/PHYSICS.md section 6)", low=1)
    adcs_per_channel: int = spec(
        'ADCs on each output channel, interleaved: the channel converts this many samples per ADC interval',
        low=1)
    digital_latency_s: float = spec(
        "time of the digital stage between one product's ADC readings and the next product's DAC inputs "
        '(partial sums, scaling, the digital parts of a model): with one DAC and one ADC interval, the '
        "latency a tiled product adds to its passes (docs/PHYSICS.md section 6)", 's', low=0.0, high=1.0)
    hold_capacitance_f: float | None = spec(
        'hold capacitance C of an analog partial sum (tiled products, partial_sums analog): each sampling of '
        'the sum onto the hold adds kT/C noise, std sqrt(k T / C) volts at the node with T = '
        'noise.thermal.temperature_k + environment.temperature_delta_k, times noise.multiplier (docs/PHYSICS.md section 3); null = no hold '
        'noise', 'F', low=1e-300)
    hold_leakage_a: float = spec(
        'leakage current I out of the hold capacitor of an analog partial sum, independent of the held level '
        '(reverse-biased switch junctions): a value held t seconds (between the waves of a time-multiplexed '
        'product) moves by -I t / C; negative = into the hold; needs hold_capacitance_f unless 0 (docs/PHYSICS.md '
        'section 3)', 'A', low=-1e-3, high=1e-3)
    hold_injection_c: float = spec(
        "charge q0 the sampling switch injects onto the hold as it opens, at a held level of 0 V: each sampling "
        'moves the sum by (q0 + k V) / C (k = hold_injection_c_per_v); needs hold_capacitance_f unless 0',
        'C', low=-1e-9, high=1e-9)
    hold_injection_c_per_v: float = spec(
        "signal-dependent part k of the switch's injected charge (its channel charge W L C_ox (V_gs - V_t) / 2 "
        'falls as the held level V raises the source): (q0 + k V) / C per sampling', 'C/V', low=-1e-9, high=1e-9)


@dataclass(frozen=True)
class Environment(Part):
    """The chip's temperature after calibration and how the analog parts follow it (docs/PHYSICS.md
    section 3): every coefficient 0 by default, so a bundled figure does not move with the temperature."""

    temperature_delta_k: float = spec(
        'temperature change of the chip since it was calibrated (the analog functions fitted, the emitters '
        'measured, the tiles predistorted); the hold\'s kT/C noise is drawn at noise.thermal.temperature_k plus '
        'it', 'K', low=-200.0, high=200.0)
    function_gain_per_k: float = spec(
        "relative gain change of the analog function circuits (elementwise.*) per kelvin: each channel's gain "
        '(1 + g_c) becomes (1 + g_c)(1 + c dT), which their gain-and-offset calibration no longer removes',
        '1/K', low=-0.1, high=0.1)
    loop_gain_per_k: float = spec(
        "relative gain change of the loop's own nonlinearity per kelvin: the calibrated sigmoid's amplitude d "
        '(its swing and small-signal gain d a) becomes d (1 + c dT), away from what the twin calibration measured '
        'and a native DEQ is compiled for; 0 on a tanh nonlinearity (the exact stage)', '1/K', low=-0.1, high=0.1)
    led_cubic_per_k: float = spec(
        "relative change of the LEDs' nonlinearity per kelvin: every emitter's t^3 and t^2 coefficients times "
        '(1 + c dT), away from what the chip measured and the tiles predistort for (as emitter.cubic_spread)',
        '1/K', low=-0.1, high=0.1)
    hold_leakage_per_k: float = spec(
        "logarithmic temperature coefficient of the hold's leakage: I exp(c dT) (junction leakage doubles about "
        'every 10 K: c = ln 2 / 10 K = 0.069 /K)', '1/K', low=0.0, high=1.0)


@dataclass(frozen=True)
class Energy(Part):
    """What the machine's parts cost in power and energy (docs/PHYSICS.md section 6); read by
    aocsim.hardware.physics.energy only, never by the loop."""

    emitter_wall_plug_efficiency: float = spec(
        'electrical-to-optical (wall-plug) efficiency of one emitter at its operating point, P_opt / P_el',
        low=0.0001, high=1.0)
    optical_link_efficiency: float = spec(
        "fraction of the emitted light that reaches the SLM planes (fan-out optics, PBS: the optics before the "
        "SLMs; the SLM's transmission excluded, it is the weights, counted once in the detectors' bias light). "
        'An emitter lights 2N pixels with P_unit d each at its bias drive d (the LED cubics\' full-scale swing, '
        '1 for tanh and identity emitters), so it emits P_emit = 2 N noise.power_per_unit_w d / link '
        'efficiency (docs/PHYSICS.md section 6)', low=1e-06, high=1.0)
    detector_tia_power_w: float = spec(
        "static electrical power of one channel's detection and loop electronics: photodetectors and TIAs of "
        'both paths, subtraction, nonlinearity, summing node, LED driver', 'W', low=0.0, high=10.0)
    slm_power_w: float = spec(
        'static electrical power of the SLMs of both paths with their drive electronics, holding one weight '
        'load', 'W', low=0.0, high=1000.0)
    slm_reload_energy_j: float = spec(
        'energy of writing one weight load onto the SLMs of both paths, beyond their static power', 'J',
        low=0.0, high=1.0)
    dac_energy_j: float = spec(
        'energy of one injection DAC conversion at energy.precision_bits bits, below the knee; at b = '
        'injection.dac_bits bits (precision_bits when null) x 2^(b - precision_bits) (a constant Walden figure '
        'of merit), above the knee x rate / knee', 'J', low=0.0, high=1e-06)
    adc_energy_j: float = spec(
        'energy of one readout ADC conversion at energy.precision_bits bits, below the knee; at b = '
        'readout.adc_bits bits x 2^(b - precision_bits), above the knee x rate / knee', 'J', low=0.0,
        high=1e-06)
    converter_knee_hz: float = spec(
        "sample rate of one converter above which its energy per conversion grows in proportion to the rate "
        "(Murmann's ADC Performance Survey: the Walden figure of merit's state of the art is flat up to "
        'about 100 MS/s and grows with the rate above)', 'Hz', low=1.0)
    idle_power_fraction: float = spec(
        "fraction of a module's emitter and electronics power it draws while it runs no pass (drivers gated, "
        "TIAs in standby; docs/PHYSICS.md section 6); its SLMs hold their pattern at full power", low=0.0,
        high=1.0)
    digital_energy_per_op_j: float = spec(
        'energy of one digital operation (partial sums, averaging, the digital parts of a model)', 'J',
        low=0.0, high=1e-06)
    precision_bits: int = spec(
        'precision the optical power and converter energies are sized for (the bits TOPS/W is quoted at; '
        '`aocsim.hardware.physics.energy.at_precision` rescales: the optical power moves the detector noise '
        'by the change in bits, thermal noise kept (x 4 per bit when shot noise dominates), and converter '
        'energy x 2 per bit)', low=1, high=24)
    converts_every_round_trip: bool = spec(
        "the machine's intended use converts N inputs (DAC) and N outputs (ADC) every round trip (a tiled "
        "matrix engine); false: only at injection and readout (the AOC's loop), so TOPS/W counts no "
        'conversions')
