"""How a model goes onto a device: `Placement`, every placement option declared once.

Each option is a field of the frozen `Placement` whose declaration (`option`) says which kinds of
placed model it applies to, with that kind's default, how a value is read and checked (one-line
`InputError` naming the option), and its help line. The Python keyword, the `aocsim compare` flag
(`--tile-size`) and the sweep key (`placement.tile_size`) all come from this declaration
(aocsim/cli/compare.py, aocsim/experiments/sweep/spec.py), so adding an option is one field here and
its use in the placed model that honours it (docs/ARCHITECTURE.md).

A field left at None takes the default of the kind it is used with (`Placement.resolved`); a value
given for a kind it does not apply to is refused, never ignored.

Kinds (aocsim/execute/registry.py): a DEQ whose state fits the device runs natively (`NATIVE`),
a larger one with its feedback on tiles (`TILED`), an implicit SSM as a hybrid (`HYBRID`), a DEQ
defined by the calibrated pipeline with its own weights (`TWIN`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from aocsim.errors import InputError
from aocsim.execute.option_readers import (MAP_KINDS, choice, count, count_or_zero, damping, decibels, ema, fraction,
                                           map_names, nonnegative, short, switch)

NATIVE, TILED, HYBRID, TWIN = "native DEQ", "tiled DEQ", "hybrid SSM", "twin DEQ"
KINDS = (NATIVE, TILED, HYBRID, TWIN)
ON_TILES = (TILED, HYBRID)  # kinds that run products on tiles
# An implicit SSM's device iteration cap where max_iter is not given: per token sequentially; a L + b for a
# sequence of L tokens simultaneously (declared once: the hybrid runs it, the help and the summary say it).
SSM_CAP_SEQUENTIAL, SSM_CAP_SIMULTANEOUS = 30, (3, 20)


def ssm_cap(mode: str, length: int) -> int:
    """The implicit SSM's device iteration cap in `mode` for sequences of `length` tokens."""
    a, b = SSM_CAP_SIMULTANEOUS
    return SSM_CAP_SEQUENTIAL if mode == "sequential" else a * length + b


def ssm_cap_words(mode: str | None) -> str:
    a, b = SSM_CAP_SIMULTANEOUS
    return f"{SSM_CAP_SEQUENTIAL} per token" if mode == "sequential" else f"{a} L + {b} iterations"


@dataclass(frozen=True)
class Declaration:
    """One option: the kinds it applies to (kind -> default), its reader, help line and CLI type."""

    defaults: Mapping[str, Any]
    read: Callable[[str, Any], Any]  # (option name, value) -> checked value, or a one-line InputError
    help: str
    flag: str = "value"  # "value" (--name VALUE) or "switch" (--name/--no-name)

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(self.defaults)


# What `modules` means, said once: its help line here (aocsim compare --help, the sweep's placement.modules);
# docs/SWEEPS.md and docs/PHYSICS.md section 6 use these words, and the sweep metric `modules` counts them.
MODULES = "the machine's optical modules, shared by all of the model's maps"
MODULES_HELP = (f"models on tiles: {MODULES} [default: one per tile of every map, weight-stationary: all tiles at "
                "once, every module's static power paid]; fewer than the model's tiles time-multiplexes them: each "
                "product writes every tile onto its module again (slm.reload_time_s per weight load), then runs "
                "them in waves of that many (docs/PHYSICS.md section 6).")


def option(defaults: Mapping[str, Any], read: Callable[[str, Any], Any], help: str, flag: str = "value") -> Any:
    """A `Placement` field: default None (the kind's own default), declared by `Declaration`."""
    return field(default=None, metadata={"declaration": Declaration(dict(defaults), read, help, flag)})


@dataclass(frozen=True)
class Placement:
    """Every placement option (module docstring); None = the default of the kind it is used with.

    Example:
        >>> Placement(on_tiles=("in_proj", "out_proj"), averaging=16, predistort=True)
    """

    tiling: bool | None = option(
        {NATIVE: True, TILED: True}, switch,
        "DEQs larger than the device: run beta W on optical tiles (else refuse them).", "switch")
    stop: str | None = option(
        {NATIVE: "tolerance", TWIN: "tolerance"}, choice("tolerance", "readout"),
        "DEQs on the loop: 'tolerance' (the loop's state at its fixed point) or 'readout' (the ADC's average "
        "after the settle window: where readout.adc_bits matters).")
    fit: bool | None = option(
        {NATIVE: True}, switch,
        "native DEQs: compile with the least-squares fit to the calibrated pipeline (else the analytic mapping).",
        "switch")
    on_tiles: tuple[str, ...] | None = option(
        {HYBRID: MAP_KINDS}, map_names,
        "implicit SSMs: the linear maps on optical tiles, comma-separated from inject, in_proj, out_proj, or "
        "'none' (all digital: the abstract noise model of the snr_* options alone); the rest digital.")
    mode: str | None = option(
        {HYBRID: "sequential"}, choice("sequential", "simultaneous"),
        "implicit SSMs: 'sequential' (token by token, the RNN) or 'simultaneous' (all tokens at once).")
    elementwise: str | None = option(
        {HYBRID: "digital"}, choice("digital", "analog"),
        "implicit SSMs: SiLU and softplus 'digital' (exact) or 'analog' (modelled circuits).")
    tile_size: int | None = option(
        {TILED: None, HYBRID: None}, count,
        "models on tiles: channels per tile side [default: the device's channels, 48 where it has any].")
    partial_sums: str | None = option(
        {TILED: "analog", HYBRID: "analog"}, choice("analog", "digital"),
        "models on tiles: a tile row's partial products added 'analog' (one ADC per output) or 'digital'.")
    averaging: int | None = option(
        {TILED: 1, HYBRID: 1}, count,
        "models on tiles: tile passes averaged per product (less noise, more time and energy).")
    predistort: bool | None = option(
        {TILED: False, HYBRID: False}, switch,
        "models on tiles: linearise the emitter drive digitally before the DAC.", "switch")
    compile: bool | None = option(
        {TILED: False, HYBRID: False}, switch,
        "models on tiles: run the tile products compiled (AOTInductor; the same numbers to float rounding; "
        "needs a C++ compiler; seconds per graph, once per computer and code: the kernel store), and a "
        "sequence model's fit and digital token steps too (docs/DEVICE_RUNS.md, compiled placements).", "switch")
    modules: int | None = option({TILED: None, HYBRID: None}, count, MODULES_HELP)
    probes: int | None = option(
        {TWIN: 0}, count_or_zero,
        "twin DEQs: after each weight load, solve this many probe inputs (evenly spread over the calibration "
        "inputs) on the chip and refit the digital readout V z + c to the nominal pipeline's outputs for them "
        "(no labels) [0: the readout as trained].")
    max_iter: int | None = option(
        {NATIVE: 2000, TILED: 100, HYBRID: None, TWIN: 2000}, count,
        "iteration cap of a device solve [native 2000, tiled 100; implicit SSMs: "
        f"{ssm_cap_words('sequential')} sequentially, {ssm_cap_words('simultaneous')} simultaneously].")
    rtol: float | None = option(
        {NATIVE: 1e-5, TILED: 1e-3, HYBRID: 0.1, TWIN: 1e-5}, fraction,
        "relative residual ||f(z) - z|| / ||f(z)|| at which a device solve stops (per sample; per token for "
        "implicit SSMs) [native 1e-5, tiled 1e-3, implicit SSMs 0.1: about aoc48's noise floor].")
    atol: float | None = option(
        {NATIVE: 1e-6, TILED: 1e-6, TWIN: 1e-6}, nonnegative,
        "DEQs: absolute residual ||f(z) - z|| added to rtol's, in the units of the iterated state (device "
        "volts natively, model units on tiles) [1e-6].")

    damping: float | None = option(
        {HYBRID: 0.8}, damping,
        "implicit SSMs: tau of the device iteration z <- (1 - tau) z + tau f(z) (the fixed point stays; "
        "how fast and how noisily it is reached changes).")
    # The SNR protocol (docs/LANGUAGE.md, noise set by an SNR; aocsim/execute/snr.py)
    snr_db: float | None = option(
        {HYBRID: None}, decibels,
        "implicit SSMs: noise set by an SNR in dB at snr_site (inf: none) [default: off].")
    snr_site: str | None = option(
        {HYBRID: "inputs"}, choice("inputs", "states"),
        "implicit SSMs: where snr_db's noise goes: 'inputs' (each block's input projection's input, every "
        "iteration) or 'states' (the SSM states committed after each token; sequential mode).")
    snr_kind: str | None = option(
        {HYBRID: "additive"}, choice("additive", "multiplicative", "device"),
        "implicit SSMs: snr_db's noise 'additive' (std rms(x) 10^(-SNR/20)), 'multiplicative' (x (1 + e), std "
        "of e 10^(-SNR/20)) or 'device' (the profile's own noise, noise.multiplier scaled to snr_db at snr_site).")
    ema_alpha: float | None = option(
        {HYBRID: None}, ema,
        "implicit SSMs: read the iteration as an EMA of its iterates, z_read <- a z_k + (1 - a) z_read, a in "
        "(0, 1] [default: the last iterate].")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None:
                object.__setattr__(self, f.name, declaration(f.name).read(f.name, value))

    def given(self) -> dict[str, Any]:
        """The options set (not None), by name."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) is not None}

    def check_for(self, kind: str, what: str) -> None:
        """A one-line InputError for the first option set that does not apply to `kind` (`what`: the model
        and device, for the message)."""
        for name, value in self.given().items():
            kinds = declaration(name).kinds
            if kind not in kinds:
                raise InputError(f"{name} = {short(value)} applies to {' and '.join(k + 's' for k in kinds)}; "
                                 f"{what} runs as a {kind}")

    def resolved(self, kind: str, what: str = "the model") -> "Placement":
        """This placement for `kind`: every option that applies filled with the kind's default where
        None; options set for other kinds refused (`check_for`)."""
        self.check_for(kind, what)
        filled = {name: d.defaults[kind] for name, d in DECLARATIONS.items()
                  if kind in d.defaults and getattr(self, name) is None}
        resolved = dataclasses.replace(self, **filled) if filled else self
        for rule in RULES:  # the rules between options, on the values the kind will use
            message = rule(resolved)
            if message:
                raise InputError(message)
        return resolved

    def attributes(self) -> dict[str, Any]:
        """The options set, as Dataset attributes (`placement.NAME`; tuples joined, booleans 0/1)."""
        out = {}
        for name, value in self.given().items():
            out[f"placement.{name}"] = (",".join(value) if isinstance(value, tuple) else
                                        int(value) if isinstance(value, bool) else value)
        return out


def _states_need_sequential(s: Placement) -> str | None:
    if s.snr_db is not None and s.snr_kind != "device" and s.snr_site == "states" and s.mode != "sequential":
        return (f"snr_site = 'states' with mode = {s.mode!r}: the SSM states are committed per token in sequential "
                "mode only; expected mode 'sequential' or snr_site 'inputs'")
    return None


def _device_noise_needs_tiles(s: Placement) -> str | None:
    if s.snr_kind == "device" and s.snr_db is not None and s.on_tiles == ():
        return ("snr_kind = 'device' with on_tiles = 'none': no map runs on the device, so its noise cannot be "
                "scaled; expected maps on tiles or snr_kind 'additive' / 'multiplicative'")
    return None


# The rules between options, declared beside them and checked in one place (`Placement.resolved`): each
# returns a one-line message when a resolved placement breaks it.
RULES: tuple[Callable[["Placement"], str | None], ...] = (_states_need_sequential, _device_noise_needs_tiles)


def declaration(name: str) -> Declaration:
    return DECLARATIONS[name]


DECLARATIONS: dict[str, Declaration] = {f.name: f.metadata["declaration"] for f in dataclasses.fields(Placement)}


def read_placement(values: Mapping[str, Any], where: str = "placement") -> Placement:
    """A Placement from a mapping of option names (a sweep point, CLI flags); unknown names refused."""
    unknown = [k for k in values if k not in DECLARATIONS]
    if unknown:
        raise InputError(f"{where}.{unknown[0]} is not a placement option; expected one of "
                         f"{', '.join(DECLARATIONS)}")
    return Placement(**{k: v for k, v in values.items() if v is not None})


def as_placement(value: Any) -> Placement:
    """`value` if it is a Placement, a Placement from a mapping of options, Placement() for None."""
    if value is None:
        return Placement()
    if isinstance(value, Placement):
        return value
    if isinstance(value, Mapping):
        return read_placement(value)
    raise InputError(f"placement = {short(value)}; expected an aocsim.execute.Placement or a mapping of its options")
