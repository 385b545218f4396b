"""A component of the device profile, declared as a typed frozen dataclass (aocsim/hardware/profiles/parts.py
has the device's components; docs/ARCHITECTURE.md).

`spec` declares a leaf (its meaning, unit, shape, range), its annotation its type (`X | None`: null
switches the feature off); `part` nests a component under a field's name, so a leaf's dotted profile key
is its attribute path (`readout.adc_bits`).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from dataclasses import field
from typing import Any, Callable, Iterator, Mapping, TypeVar

import numpy as np

N = "N"  # a shape entry: the profile's channel count
_P = TypeVar("_P", bound="Part")


def spec(doc: str, unit: str = "", *, shape: tuple[int | str, ...] | None = None, low: float | None = None,
         high: float | None = None, choices: tuple[str, ...] = (), lengths: tuple[int, ...] = ()) -> Any:
    """A leaf field: its meaning, unit, array shape (entries int or N), inclusive bounds, allowed strings or
    lengths of a free-length 1-D array."""
    return field(metadata={"spec": dict(doc=doc, unit=unit, shape=shape, low=low, high=high, choices=choices,
                                        lengths=lengths)})


def part() -> Any:
    """A field that is itself a component (its keys nest under the field's name)."""
    return field(metadata={"part": True})


_KINDS = ((bool, "bool"), (int, "int"), (float, "float"), (str, "str"), (np.ndarray, "array"))


def _kind(hint: Any) -> tuple[str, bool]:
    """(schema kind, nullable) of a leaf's annotation."""
    args = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    base = [a for a in args if a is not type(None)]
    if base == [float, str]:  # a number, or one of the words its spec's choices name (`noise.bias_units: auto`)
        return "float", len(args) > len(base)
    for cls, name in _KINDS:
        if base == [cls]:
            return name, len(args) > len(base)
    raise TypeError(f"profile field of type {hint!r}; expected bool, int, float, str or np.ndarray, or one of "
                    "them | None, or float | str")


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """A component class's annotations resolved to types, once per class (a profile builds its tree per
    variant: `DeviceProfile.parts`)."""
    return typing.get_type_hints(cls)


class Part:
    """A component of the device: a frozen dataclass of typed leaves and nested components (module
    docstring)."""

    @classmethod
    def leaves(cls, prefix: str = "") -> Iterator[tuple[str, str, bool, dict[str, Any]]]:
        """(dotted key, kind, nullable, spec) of every leaf, in declaration order, nested components in place."""
        hints = _hints(cls)
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if "part" in f.metadata:
                yield from hints[f.name].leaves(f"{prefix}{f.name}.")
            else:
                yield (f"{prefix}{f.name}", *_kind(hints[f.name]), f.metadata["spec"])

    @classmethod
    def from_values(cls: type[_P], values: Mapping[str, Any], prefix: str = "") -> _P:
        """The component from {dotted key: value} (a validated profile's values)."""
        hints = _hints(cls)
        return cls(**{f.name: (hints[f.name].from_values(values, f"{prefix}{f.name}.") if "part" in f.metadata
                               else values[f"{prefix}{f.name}"])
                      for f in dataclasses.fields(cls)})  # type: ignore[arg-type]

    def map_leaves(self: _P, keys: Iterator[str] | tuple[str, ...], change: Callable[[str, Any], Any],
                   prefix: str = "") -> _P:
        """This component with each leaf whose dotted key is in `keys` replaced by change(key, value)."""
        keys = tuple(keys)
        new = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value, key = getattr(self, f.name), f"{prefix}{f.name}"
            if "part" in f.metadata and any(k.startswith(key + ".") for k in keys):
                new[f.name] = value.map_leaves(keys, change, key + ".")
            elif key in keys:
                new[f.name] = change(key, value)
        return dataclasses.replace(self, **new) if new else self  # type: ignore[type-var]
