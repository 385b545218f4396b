"""The converters: how fast they let a tile pass go, and what a conversion costs (docs/PHYSICS.md section 6).

Every channel of a module takes its input through injection DACs and gives its output to readout ADCs.
A converter makes one conversion per interval (`injection.dac_interval_iterations`,
`readout.sample_interval_iterations` round trips: the same interval the native readout samples at), and
a channel has `dacs_per_channel` / `adcs_per_channel` of them, interleaved. So a tile pass, which
converts one input and one output per channel, cannot be shorter than an interval over the converters
of a channel (`pass_time_s`), and a product adds what cannot overlap its passes: its first inputs'
conversion, its last outputs' and the digital stage before the next product (`product_latency_s`). A
conversion costs its reference energy, quoted at `energy.precision_bits`, times 2 per bit (a constant
Walden figure of merit) and times rate / knee above the knee (`conversion_energy_j`).
"""

from __future__ import annotations

from aocsim.hardware.profiles.parts import Parts

def converter_rate_hz(parts: Parts, kind: str) -> float:
    """Sample rate of one converter (`kind` "dac" or "adc"): one conversion per interval of its round trips
    (`injection.dac_interval_iterations`, `readout.sample_interval_iterations`)."""
    every = parts.injection.dac_interval_iterations if kind == "dac" else parts.readout.sample_interval_iterations
    return 1.0 / (every * float(parts.loop.round_trip_s))


def step_energy_ratio(from_bits: int, to_bits: int) -> float:
    """A converter's energy at `to_bits` over its energy at `from_bits` at one rate: 2^(to - from), a constant
    Walden figure of merit (energy per conversion step). The one place the rule lives: conversions are
    priced by it (`conversion_energy_j`) and a profile's reference energies moved by it (`energy.at_precision`)."""
    return 2.0 ** (to_bits - from_bits)


def conversion_energy_j(parts: Parts, kind: str) -> float:
    """Energy of one conversion of the injection DAC (`kind` "dac") or the readout ADC ("adc") at its bits
    and rate (docs/PHYSICS.md section 6): the profile's energy at `energy.precision_bits` times
    2^(bits - precision_bits) (a constant Walden figure of merit: energy per conversion step; null bits, an
    ideal converter, priced at precision_bits), times rate / knee above `energy.converter_knee_hz`
    (Murmann's ADC Performance Survey: the state of the art's figure of merit worsens in proportion to
    the rate above about 100 MS/s)."""
    e = parts.energy
    reference, bits = ((e.dac_energy_j, parts.injection.dac_bits) if kind == "dac" else
                       (e.adc_energy_j, parts.readout.adc_bits))
    steps = step_energy_ratio(e.precision_bits, e.precision_bits if bits is None else bits)
    return float(reference) * steps * max(1.0, converter_rate_hz(parts, kind) / float(e.converter_knee_hz))


def pass_time_s(parts: Parts) -> float:
    """One tile pass: a round trip, or longer where the converters cannot keep up (docs/PHYSICS.md section 6):
    every channel of a module takes one input through its DACs and gives one output to its ADCs per pass,
    and a converter makes one conversion per interval, so a pass lasts at least an interval over the
    converters of a channel (the conversions pipelined with the light: a pass's outputs convert while the
    next pass runs)."""
    rt = float(parts.loop.round_trip_s)
    adc = parts.readout.sample_interval_iterations * rt / parts.readout.adcs_per_channel
    dac = parts.injection.dac_interval_iterations * rt / parts.injection.dacs_per_channel
    return max(rt, adc, dac)


def product_latency_s(parts: Parts) -> float:
    """What a product adds to its passes (docs/PHYSICS.md section 6): its first inputs' DAC conversion before
    the first pass, its last outputs' ADC conversion after the last, and the digital stage that makes the
    next product's inputs (`readout.digital_latency_s`)."""
    rt = float(parts.loop.round_trip_s)
    return ((parts.injection.dac_interval_iterations + parts.readout.sample_interval_iterations) * rt
            + float(parts.readout.digital_latency_s))


def converter_lines(parts: Parts) -> list[str]:
    """The converter budget (`aocsim devices show`): each converter's bits, rate, count per channel and
    energy per conversion; a tile pass's pace and a product's latency."""
    from aocsim.units import si

    def one(kind: str) -> str:
        bits, count = ((parts.injection.dac_bits, parts.injection.dacs_per_channel) if kind == "dac" else
                       (parts.readout.adc_bits, parts.readout.adcs_per_channel))
        rate = si(converter_rate_hz(parts, kind), "S/s")
        return (f"{kind.upper()} {bits if bits is not None else 'ideal'} bits at {rate} x {count} per channel, "
                f"{si(conversion_energy_j(parts, kind), 'J')} per conversion")

    return [one("dac"), one("adc"),
            f"a tile pass {si(pass_time_s(parts), 's')} (a round trip {si(parts.loop.round_trip_s, 's')}); "
            f"{si(product_latency_s(parts), 's')} latency per product (DAC, ADC, digital stage)"]
