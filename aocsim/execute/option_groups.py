"""The placement options, grouped by concern: each group a frozen dataclass of declared options, passed
whole to the code that honours it (aocsim/execute/placement.py builds `Placement` from them).

An option is one field declared by `option`: the kinds it applies to with each kind's default, how a
value is read and checked (aocsim/execute/option_readers.py), its help line and an example value.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from aocsim.execute.option_readers import (MAP_KINDS, choice, count, count_or_zero, damping, decibels, ema, fraction,
                                           map_names, nonnegative, switch)

NATIVE, TILED, HYBRID, TWIN, MAMBA2 = "native DEQ", "tiled DEQ", "hybrid SSM", "twin DEQ", "hybrid Mamba2"
KINDS = (NATIVE, TILED, HYBRID, TWIN, MAMBA2)
ON_TILES = (TILED, HYBRID, MAMBA2)  # kinds that run products on tiles
# An implicit SSM's device iteration cap where max_iter is not given: per token sequentially; a L + b for a
# sequence of L tokens simultaneously (declared once: the hybrid runs it, the help and the summary say it).
SSM_CAP_SEQUENTIAL, SSM_CAP_SIMULTANEOUS = 30, (3, 20)
# The calibration fit of a map's tile program (aocsim/execute/tile_program.py): random drives per measurement
# of its effective matrix, and closed-loop corrections (a5-implicit's in_proj on aoc48-twin: 4.0 % error after
# 6, 1.2 % after 12). Both are the `fit_probes` and `fit_rounds` options' defaults.
FIT_PROBES, FIT_ROUNDS = 2048, 12


def ssm_cap(mode: str, length: int) -> int:
    """The implicit SSM's device iteration cap in `mode` for sequences of `length` tokens."""
    a, b = SSM_CAP_SIMULTANEOUS
    return SSM_CAP_SEQUENTIAL if mode == "sequential" else a * length + b


def ssm_cap_words(mode: str | None) -> str:
    a, b = SSM_CAP_SIMULTANEOUS
    return f"{SSM_CAP_SEQUENTIAL} per token" if mode == "sequential" else f"{a} L + {b} iterations"


def kinds_words(kinds: tuple[str, ...] | list[str]) -> str:
    """Kinds in words, plural: 'tiled DEQs, hybrid SSMs and hybrid Mamba2s'."""
    names = [k + "s" for k in kinds]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


@dataclass(frozen=True)
class Declaration:
    """One option: the kinds it applies to (kind -> default), its reader, help line, CLI type, and a value it
    accepts other than its default (`example`: what the generic tests and the help give it)."""

    defaults: Mapping[str, Any]
    read: Callable[[str, Any], Any]  # (option name, value) -> checked value, or a one-line InputError
    help: str
    flag: str = "value"  # "value" (--name VALUE) or "switch" (--name/--no-name)
    example: Any = None

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


def option(defaults: Mapping[str, Any], read: Callable[[str, Any], Any], help: str, flag: str = "value", *,
           example: Any) -> Any:
    """A field of an option group: default None (the kind's own default), declared by `Declaration`."""
    return field(default=None, metadata={"declaration": Declaration(dict(defaults), read, help, flag, example)})


class OptionGroup:
    """Options of one concern, passed whole to the code that honours them (module docstring)."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is not None:
                object.__setattr__(self, f.name, f.metadata["declaration"].read(f.name, value))

    def given(self) -> dict[str, Any]:
        """The options set (not None), by name."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)  # type: ignore[arg-type]
                if getattr(self, f.name) is not None}

    def resolved(self, kind: str) -> Any:
        """This group with every option left at None that applies to `kind` set to that kind's default."""
        filled = {f.name: f.metadata["declaration"].defaults[kind]
                  for f in dataclasses.fields(self)  # type: ignore[arg-type]
                  if getattr(self, f.name) is None and kind in f.metadata["declaration"].defaults}
        return dataclasses.replace(self, **filled) if filled else self  # type: ignore[type-var]


@dataclass(frozen=True)
class DeqOptions(OptionGroup):
    """What only DEQs choose: tiles for those larger than the device, the native compiler's fit, the twin's
    probes."""

    tiling: bool | None = option(
        {NATIVE: True, TILED: True}, switch,
        "DEQs larger than the device: run beta W on optical tiles (else refuse them).", "switch", example=False)
    fit: bool | None = option(
        {NATIVE: True}, switch,
        "native DEQs: compile with the least-squares fit to the calibrated pipeline (else the analytic mapping).",
        "switch", example=False)
    probes: int | None = option(
        {TWIN: 0}, count_or_zero,
        "twin DEQs: after each weight load, solve this many probe inputs (evenly spread over the calibration "
        "inputs) on the chip and refit the digital readout V z + c to the nominal pipeline's outputs for them "
        "(no labels) [0: the readout as trained].", example=32)


@dataclass(frozen=True)
class SequenceOptions(OptionGroup):
    """How an implicit SSM's token loop goes onto the machine (aocsim/execute/ssm_device.py)."""

    on_tiles: tuple[str, ...] | None = option(
        {HYBRID: MAP_KINDS, MAMBA2: MAP_KINDS[1:]}, map_names,
        "implicit SSMs and plain Mamba2 models: the linear maps on optical tiles, comma-separated from inject "
        "(implicit SSMs only), in_proj, out_proj, or 'none' (all digital: for implicit SSMs, the abstract noise "
        "model of the snr_* options alone); the rest digital.",
        example="in_proj")
    mode: str | None = option(
        {HYBRID: "sequential"}, choice("sequential", "simultaneous"),
        "implicit SSMs: 'sequential' (token by token, the RNN) or 'simultaneous' (all tokens at once).",
        example="simultaneous")
    elementwise: str | None = option(
        {HYBRID: "digital"}, choice("digital", "analog"),
        "implicit SSMs: SiLU and softplus 'digital' (exact) or 'analog' (modelled circuits).", example="analog")


@dataclass(frozen=True)
class TileOptions(OptionGroup):
    """How a model's linear maps run on optical tiles (aocsim/execute/map_fit.py: `fit_maps`,
    `DeviceLinear`)."""

    tile_size: int | None = option(
        {TILED: None, HYBRID: None, MAMBA2: None}, count,
        "models on tiles: channels per tile side [default: the device's channels, 48 where it has any].", example=16)
    partial_sums: str | None = option(
        {TILED: "analog", HYBRID: "analog", MAMBA2: "analog"}, choice("analog", "digital"),
        "models on tiles: a tile row's partial products added 'analog' (one ADC per output) or 'digital'.",
        example="digital")
    averaging: int | None = option(
        {TILED: 1, HYBRID: 1, MAMBA2: 1}, count,
        "models on tiles: tile passes averaged per product (less noise, more time and energy).", example=2)
    predistort: bool | None = option(
        {TILED: False, HYBRID: False, MAMBA2: False}, switch,
        "models on tiles: linearise the emitter drive digitally before the DAC.", "switch", example=True)
    compile: bool | None = option(
        {TILED: False, HYBRID: False}, switch,
        "models on tiles: run the tile products compiled (AOTInductor; the same numbers to float rounding; "
        "needs a C++ compiler; seconds per graph, once per computer and code: the kernel store), and a "
        "sequence model's fit and digital token steps too (docs/DEVICE_RUNS.md, compiled placements).", "switch",
        example=True)
    modules: int | None = option({TILED: None, HYBRID: None, MAMBA2: None}, count, MODULES_HELP, example=2)
    fit_probes: int | None = option(
        dict.fromkeys(ON_TILES, FIT_PROBES), count, f"models on tiles: random drives per measurement of a tile "
        f"program's effective matrix while the chip calibrates it, more than a map's inputs [{FIT_PROBES}] (fewer: "
        "a faster, noisier fit).",
        example=256)
    fit_rounds: int | None = option(
        dict.fromkeys(ON_TILES, FIT_ROUNDS), count_or_zero, f"models on tiles: closed-loop corrections of each "
        f"tile program while the chip calibrates it [{FIT_ROUNDS}] (fewer: a faster, less exact calibration).",
        example=4)

    def words(self) -> str:
        """How the tiles run beyond the defaults, in words for a Dataset attribute ('' for the defaults)."""
        how = [f"each product the mean of {self.averaging} passes"] * ((self.averaging or 1) > 1)
        fit = (self.fit_probes or FIT_PROBES, FIT_ROUNDS if self.fit_rounds is None else self.fit_rounds)
        how += [f"tile programs calibrated on {fit[0]} probes x {fit[1]} rounds"] * (fit != (FIT_PROBES, FIT_ROUNDS))
        return "; ".join(how + ["emitter drive predistorted"] * bool(self.predistort))

    def fitted(self) -> "TileOptions":
        """The options a tile program's fit reads (averaging is not one: points that differ only in it share
        their fits, aocsim/execute/map_fit.py `fit_maps`)."""
        return dataclasses.replace(self, averaging=None)


@dataclass(frozen=True)
class SolveOptions(OptionGroup):
    """When and how a device solve stops, and how it steps."""

    stop: str | None = option(
        {NATIVE: "tolerance", TWIN: "tolerance"}, choice("tolerance", "readout"),
        "DEQs on the loop: 'tolerance' (the loop's state at its fixed point) or 'readout' (the ADC's average "
        "after the settle window: where readout.adc_bits matters).", example="readout")
    max_iter: int | None = option(
        {NATIVE: 2000, TILED: 100, HYBRID: None, TWIN: 2000}, count,
        "iteration cap of a device solve [native 2000, tiled 100; implicit SSMs: "
        f"{ssm_cap_words('sequential')} sequentially, {ssm_cap_words('simultaneous')} simultaneously].", example=5)
    rtol: float | None = option(
        {NATIVE: 1e-5, TILED: 1e-3, HYBRID: 0.1, TWIN: 1e-5}, fraction,
        "relative residual ||f(z) - z|| / ||f(z)|| at which a device solve stops (per sample; per token for "
        "implicit SSMs) [native 1e-5, tiled 1e-3, implicit SSMs 0.1: about aoc48's noise floor].", example=0.01)
    atol: float | None = option(
        {NATIVE: 1e-6, TILED: 1e-6, TWIN: 1e-6}, nonnegative,
        "DEQs: absolute residual ||f(z) - z|| added to rtol's, in the units of the iterated state (device "
        "volts natively, model units on tiles) [1e-6].", example=1e-3)
    damping: float | None = option(
        {HYBRID: 0.8}, damping,
        "implicit SSMs: tau of the device iteration z <- (1 - tau) z + tau f(z) (the fixed point stays; "
        "how fast and how noisily it is reached changes).", example=0.5)


@dataclass(frozen=True)
class NoiseInjection(OptionGroup):
    """Noise set by an SNR and the EMA readout (docs/LANGUAGE.md, noise set by an SNR): honoured by one wrapper
    around a placed model of any kind with noise sites (aocsim/execute/noise_injection.py, `NoiseInjected`;
    the parts it attaches: aocsim/execute/snr.py)."""

    snr_db: float | None = option(
        {HYBRID: None, MAMBA2: None}, decibels,
        "implicit SSMs and plain Mamba2 models: noise set by an SNR in dB at snr_site (inf: none) [default: off].",
        example=20.0)
    snr_site: str | None = option(
        {HYBRID: "inputs", MAMBA2: "inputs"}, choice("inputs", "states"),
        "implicit SSMs and plain Mamba2 models: where snr_db's noise goes: 'inputs' (each block's input "
        "projection's input, every iteration) or 'states' (implicit SSMs: the SSM states committed after each "
        "token; sequential mode).", example="states")
    snr_kind: str | None = option(
        {HYBRID: "additive", MAMBA2: "additive"}, choice("additive", "multiplicative", "device"),
        "implicit SSMs and plain Mamba2 models: snr_db's noise 'additive' (std rms(x) 10^(-SNR/20)), "
        "'multiplicative' (x (1 + e), std of e 10^(-SNR/20)) or 'device' (implicit SSMs: the profile's own noise, "
        "noise.multiplier scaled to snr_db at snr_site).", example="multiplicative")
    snr_states_db: float | None = option(
        {HYBRID: None}, decibels,
        "implicit SSMs, sequential mode: a second noise on the SSM states with its own SNR in dB, drawn beside "
        "snr_db's on the inputs (snr_site 'inputs'), of the same snr_kind and snr_convention: the implicit-LM "
        "paper's grid of state noise against input noise [default: none].", example=30.0)
    ema_alpha: float | None = option(
        {HYBRID: None}, ema,
        "implicit SSMs: read the iteration as an EMA of its iterates, z_read <- a z_k + (1 - a) z_read, a in "
        "(0, 1] [default: the last iterate].", example=0.2)
    snr_convention: str | None = option(
        {HYBRID: "rms", MAMBA2: "rms"}, choice("rms", "elementwise"),
        "implicit SSMs and plain Mamba2 models: what snr_db and ema_alpha mean: 'rms' (std rms(x) 10^(-SNR/20) "
        "over each token's vector, every token; the states committed from the last iterate) or 'elementwise' (the "
        "implicit-LM paper's code: std "
        "|x_i| 10^(-SNR/20) per element, multiplicative x + x |x| 10^(-SNR/20) e; the first token noise-free; with "
        "ema_alpha, sequential mode, the stop test reads the EMA m <- (1 - a) m + a f(z) from m = 0, and one more "
        "map call at m commits the states and gives z = f(m)) (docs/LANGUAGE.md).", example="elementwise")
    snr_convergence: str | None = option(
        {HYBRID: "token"}, choice("token", "batch"),
        "implicit SSMs, sequential mode: a token's iteration stops per sequence ('token': each at rtol) or for the "
        "whole batch at once ('batch', the implicit-LM paper's code: every sequence iterates until the batch's "
        "relative change is at most rtol).", example="batch")

    def injects(self) -> bool:
        """Whether the options set do anything: noise, a readout or a stop test over the batch (then runs go
        through the wrapper, aocsim/execute/registry.py `Placed.build`); `words` says what."""
        return (self.snr_db is not None or self.snr_states_db is not None or self.ema_alpha is not None
                or self.snr_convergence == "batch")

    def words(self) -> list[str]:
        """What the noise options set do, in words for a Dataset attribute (none at their defaults)."""
        elementwise = self.snr_convention == "elementwise"
        out = []
        if self.snr_db is not None:
            out.append(f"noise at {self.snr_db:g} dB SNR on the {self.snr_site} ({self.snr_kind}"
                       + (", per element, the first token noise-free)" if elementwise else ")"))
        if self.snr_states_db is not None:
            out.append(f"noise at {self.snr_states_db:g} dB SNR on the states ({self.snr_kind})")
        if self.ema_alpha is not None:
            out.append(f"EMA alpha {self.ema_alpha:g}, states committed from it" if elementwise else
                       f"EMA readout alpha {self.ema_alpha:g}")
        if self.snr_convergence == "batch":
            out.append("a token's iteration stops for the whole batch")
        return out
