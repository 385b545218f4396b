"""How a model goes onto a device: `Placement`, every placement option declared once, grouped by concern.

Options come in groups, each a frozen dataclass passed whole to the code that honours it: `TileOptions`
(how linear maps run on tiles), `SolveOptions` (when a device solve stops, how it steps),
`SequenceOptions` (an implicit SSM's token loop), `NoiseInjection` (noise set by an SNR, the EMA readout)
and `DeqOptions` (what only DEQs choose). `Placement` inherits every group's fields: one flat namespace
from which the Python keywords, the `aocsim compare` flags (`--tile-size`) and the sweep keys
(`placement.tile_size`) are generated (aocsim/cli/compare.py, aocsim/experiments/sweep/spec.py). An
option's declaration (`option`, in aocsim/execute/option_groups.py) says which kinds it applies to with
each kind's default, how a value is read and checked (a one-line `InputError` naming the option), its
help line and an example value; so adding one is its field in a group, its use where that group is
honoured, and a test (docs/ARCHITECTURE.md).

A field left at None takes the default of the kind it is used with (`Placement.resolved`); a value
given for a kind it does not apply to is refused, never ignored; the rules between options
(`RULES`, aocsim/execute/option_rules.py) are checked in the same place.

Kinds (aocsim/execute/registry.py): a DEQ whose state fits the device runs natively (`NATIVE`),
a larger one with its feedback on tiles (`TILED`), an implicit SSM as a hybrid (`HYBRID`), a DEQ
defined by the calibrated pipeline with its own weights (`TWIN`), a plain Mamba2 language model with
its projections on tiles (`MAMBA2`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from aocsim.errors import InputError
from aocsim.execute.option_groups import (HYBRID, KINDS, MODULES, MODULES_HELP, NATIVE, ON_TILES, TILED, TWIN,
                                          Declaration, DeqOptions, NoiseInjection, OptionGroup, SequenceOptions,
                                          SolveOptions, TileOptions, kinds_words, ssm_cap, ssm_cap_words)
from aocsim.execute.option_rules import RULES
from aocsim.execute.option_readers import short

__all__ = ["HYBRID", "KINDS", "MODULES", "MODULES_HELP", "NATIVE", "ON_TILES", "TILED", "TWIN", "Declaration",
           "DeqOptions", "NoiseInjection", "OptionGroup", "Placement", "SequenceOptions", "SolveOptions",
           "TileOptions", "as_placement", "declaration", "kinds_words", "read_placement", "ssm_cap", "ssm_cap_words"]


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
                raise InputError(f"{name} = {short(value)} applies to {kinds_words(kinds)}; "
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
