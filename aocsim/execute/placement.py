"""How a model goes onto a device: `Placement`, every placement option declared once, grouped by concern.

Options come in groups, each a frozen dataclass passed whole to the code that honours it: `TileOptions`
(how linear maps run on tiles), `SolveOptions` (when a device solve stops, how it steps),
`SequenceOptions` (an implicit SSM's token loop), `NoiseInjection` (noise set by an SNR, the EMA readout)
and `DeqOptions` (what only DEQs choose). `Placement` inherits every group's fields: one flat namespace
from which the Python keywords, the `aocsim compare` flags (`--tile-size`) and the sweep keys
(`placement.tile_size`) are generated (aocsim/cli/compare.py, aocsim/experiments/sweep/spec.py). An
option's declaration (`option`) says which kinds it applies to with each kind's default, how a value is
read and checked (a one-line `InputError` naming the option), its help line and an example value; so
adding one is its field here, its use where its group is honoured, and a test (docs/ARCHITECTURE.md).

A field left at None takes the default of the kind it is used with (`Placement.resolved`); a value
given for a kind it does not apply to is refused, never ignored; the rules between options (`RULES`)
are checked in the same place.

Kinds (aocsim/execute/registry.py): a DEQ whose state fits the device runs natively (`NATIVE`),
a larger one with its feedback on tiles (`TILED`), an implicit SSM as a hybrid (`HYBRID`), a DEQ
defined by the calibrated pipeline with its own weights (`TWIN`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from aocsim.errors import InputError
from aocsim.execute.option_groups import (HYBRID, KINDS, MODULES, MODULES_HELP, NATIVE, ON_TILES, TILED, TWIN,
                                          Declaration, DeqOptions, NoiseInjection, OptionGroup, SequenceOptions,
                                          SolveOptions, TileOptions, ssm_cap, ssm_cap_words)
from aocsim.execute.option_readers import short

__all__ = ["HYBRID", "KINDS", "MODULES", "MODULES_HELP", "NATIVE", "ON_TILES", "TILED", "TWIN", "Declaration",
           "DeqOptions", "NoiseInjection", "OptionGroup", "Placement", "SequenceOptions", "SolveOptions",
           "TileOptions", "as_placement", "declaration", "read_placement", "ssm_cap", "ssm_cap_words"]


# The groups, in the order their options are listed (help, Dataset attributes); `Placement` is all of them.
GROUPS: dict[str, type[OptionGroup]] = {"deq": DeqOptions, "sequence": SequenceOptions, "tile": TileOptions,
                                        "solve": SolveOptions, "noise": NoiseInjection}


@dataclass(frozen=True)
class Placement(NoiseInjection, SolveOptions, TileOptions, SequenceOptions, DeqOptions):
    """Every placement option, one flat namespace generated from the groups (module docstring); None = the
    default of the kind it is used with. `placement.tile`, `.solve`, `.sequence`, `.noise`, `.deq`: a group
    whole, for the code that honours it.

    Example:
        >>> Placement(on_tiles=("in_proj", "out_proj"), averaging=16, predistort=True).tile.averaging
        16
    """

    def group(self, name: str) -> Any:
        cls = GROUPS[name]
        return cls(**{f.name: getattr(self, f.name) for f in dataclasses.fields(cls)})

    @property
    def deq(self) -> DeqOptions:
        return self.group("deq")

    @property
    def sequence(self) -> SequenceOptions:
        return self.group("sequence")

    @property
    def tile(self) -> TileOptions:
        return self.group("tile")

    @property
    def solve(self) -> SolveOptions:
        return self.group("solve")

    @property
    def noise(self) -> NoiseInjection:
        return self.group("noise")

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


def _state_noise_is_a_second_site(s: Placement) -> str | None:
    if s.snr_states_db is None:
        return None
    if s.mode != "sequential":
        return (f"snr_states_db with mode = {s.mode!r}: the SSM states are committed per token in sequential mode "
                "only; expected mode 'sequential'")
    if s.snr_kind == "device" or (s.snr_db is not None and s.snr_site == "states"):
        return (f"snr_states_db with snr_kind = {s.snr_kind!r} and snr_site = {s.snr_site!r}: it is drawn noise on "
                "the states beside snr_db's on the inputs; expected snr_site 'inputs' and snr_kind 'additive' or "
                "'multiplicative'")
    return None


def _device_noise_needs_tiles(s: Placement) -> str | None:
    if s.snr_kind == "device" and s.snr_db is not None and s.on_tiles == ():
        return ("snr_kind = 'device' with on_tiles = 'none': no map runs on the device, so its noise cannot be "
                "scaled; expected maps on tiles or snr_kind 'additive' / 'multiplicative'")
    return None


def _reference_ema_needs_sequential(s: Placement) -> str | None:
    if s.snr_convention == "elementwise" and s.ema_alpha is not None and s.mode != "sequential":
        return (f"snr_convention = 'elementwise' with ema_alpha and mode = {s.mode!r}: the states are committed from "
                "the EMA value per token, in sequential mode only; expected mode 'sequential' or snr_convention 'rms'")
    return None


def _batch_convergence_needs_sequential(s: Placement) -> str | None:
    if s.snr_convergence == "batch" and s.mode != "sequential":
        return (f"snr_convergence = 'batch' with mode = {s.mode!r}: the batch's stop test is per token, in "
                "sequential mode only; expected mode 'sequential' or snr_convergence 'token'")
    return None


def _elementwise_is_drawn_noise(s: Placement) -> str | None:
    if s.snr_convention == "elementwise" and s.snr_kind == "device" and s.snr_db is not None:
        return ("snr_convention = 'elementwise' with snr_kind = 'device': a profile's own noise is scaled to a power "
                "ratio at the site, not drawn per element; expected snr_kind 'additive' / 'multiplicative' or "
                "snr_convention 'rms'")
    return None


# The rules between options, declared beside them and checked in one place (`Placement.resolved`): each
# returns a one-line message when a resolved placement breaks it.
RULES: tuple[Callable[["Placement"], str | None], ...] = (_states_need_sequential, _state_noise_is_a_second_site,
                                                          _device_noise_needs_tiles,
                                                          _reference_ema_needs_sequential,
                                                          _batch_convergence_needs_sequential,
                                                          _elementwise_is_drawn_noise)


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
