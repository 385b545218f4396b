"""The device's typed components: every profile field declared once, as a typed attribute of the component
it belongs to (docs/PHYSICS.md section 2 has the pipeline; devices/SCHEMA.md the generated table).

A profile's dotted key is the path of its attribute (`readout.adc_bits` is `Parts.readout.adc_bits`;
aocsim/hardware/profiles/part.py declares how). `DeviceProfile.parts` builds the tree once from the
validated values, so the physics reads `parts.noise.shot.enabled`, typed, and a function that needs one
component takes that component (`rin_std(noise: Noise)`), never a dotted string.
aocsim/hardware/profiles/schema.py derives the key table, validation and devices/SCHEMA.md from these
classes. The components: optical_parts.py (the light's path), electronic_parts.py (noise, static draws,
readout, energy).
"""

from __future__ import annotations

from dataclasses import dataclass

from aocsim.hardware.profiles.electronic_parts import (DarkCurrent, Drift, Elementwise, Energy, Environment,
                                                       Noise, Readout,
                                                       Rin, ShotNoise, ThermalNoise, Variation)
from aocsim.hardware.profiles.optical_parts import (BeamSplitterCrosstalk, ClosedLoop, Crosstalk, Detector,
                                                    DetectorCrosstalk, Emitter, Injection, Loop, Nonlinearity,
                                                    Saturation, Slm)
from aocsim.hardware.profiles.part import N, Part, part, spec

__all__ = ["BeamSplitterCrosstalk", "ClosedLoop", "Crosstalk", "DarkCurrent", "Detector", "DetectorCrosstalk",
           "Drift", "Elementwise", "Emitter", "Energy", "Environment", "Injection", "Loop", "N", "Noise", "Nonlinearity", "Part",
           "Parts", "Readout", "Rin", "Saturation", "ShotNoise", "Slm", "ThermalNoise", "Variation"]


@dataclass(frozen=True)
class Parts(Part):
    """Every component of one device, as a profile describes it (`DeviceProfile.parts`)."""

    channels: int | None = spec("number of loop channels N (state variables); null = any size (only when every "
                                "per-channel field is a single number)", low=1)
    loop: Loop = part()
    nonlinearity: Nonlinearity = part()
    emitter: Emitter = part()
    slm: Slm = part()
    detector: Detector = part()
    crosstalk: Crosstalk = part()
    closed_loop: ClosedLoop = part()
    injection: Injection = part()
    saturation: Saturation = part()
    noise: Noise = part()
    variation: Variation = part()
    drift: Drift = part()
    elementwise: Elementwise = part()
    readout: Readout = part()
    environment: Environment = part()
    energy: Energy = part()
