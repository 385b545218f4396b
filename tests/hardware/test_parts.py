"""The device's typed components (aocsim/hardware/profiles/parts.py): every profile field declared once,
read by the physics as a typed attribute, never as a dotted key (docs/ARCHITECTURE.md, "A profile field")."""

from __future__ import annotations

import ast
import dataclasses
import typing
from pathlib import Path

import numpy as np
import pytest

from aocsim.hardware.profiles.parts import Part, Parts
from aocsim.hardware.profiles.profile import available_devices, load_device
from aocsim.hardware.profiles.schema import ABOUT, FIELDS

AOCSIM = Path(__file__).resolve().parents[2] / "aocsim"
# The code that does the physics: it reads components, never keys (the profiles room parses them).
PHYSICS = ("hardware/physics", "hardware/engine", "execute", "nn", "solve")


def _leaf_values(part: Part, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for f in dataclasses.fields(part):  # type: ignore[arg-type]
        value = getattr(part, f.name)
        if isinstance(value, Part):
            out.update(_leaf_values(value, f"{prefix}{f.name}."))
        else:
            out[f"{prefix}{f.name}"] = value
    return out


def test_the_schema_reads_each_fields_type_and_nullability_from_its_annotation() -> None:
    # Fault guarded (seen failing with nullability dropped from the annotation's reading): a schema whose
    # kinds or nulls drift from the types the physics is promised.
    by_key = {f.key: f for f in FIELDS}
    assert (by_key["slm.bits"].kind, by_key["slm.bits"].nullable) == ("int", True)
    assert (by_key["noise.shot.enabled"].kind, by_key["noise.shot.enabled"].nullable) == ("bool", False)
    assert (by_key["readout.range_v"].kind, by_key["readout.range_v"].shape) == ("array", (2,))
    assert (by_key["loop.bandwidth_hz"].kind, by_key["loop.bandwidth_hz"].nullable) == ("float", True)
    assert (by_key["nonlinearity.kind"].kind, by_key["nonlinearity.kind"].choices) == (
        "str", ("tanh", "algebraic_sigmoid"))
    assert [f.key for f in FIELDS] == [f.key for f in ABOUT] + [key for key, *_ in Parts.leaves()]


@pytest.mark.parametrize("name", available_devices())
def test_every_bundled_profile_reads_back_whole_through_its_components(name: str) -> None:
    """Each leaf is the profile's value, the same object (no copy, no conversion), and nothing is left out."""
    profile = load_device(name)
    leaves = _leaf_values(profile.parts)
    assert set(leaves) == set(profile.values) - {f.key for f in ABOUT}
    assert all(leaves[key] is profile.values[key] for key in leaves)


@pytest.mark.parametrize("name", available_devices())
def test_every_component_holds_the_type_its_annotation_declares(name: str) -> None:
    # Fault guarded (seen failing with the float normalisation dropped from checks.py: noise.bias_units = 570
    # an int): a component holding another type than the one its signature promises.
    def check(part: Part, prefix: str = "") -> None:
        hints = typing.get_type_hints(type(part))
        for f in dataclasses.fields(part):  # type: ignore[arg-type]
            value, hint = getattr(part, f.name), hints[f.name]
            if isinstance(value, Part):
                check(value, f"{prefix}{f.name}.")
                continue
            allowed = tuple(t for t in typing.get_args(hint) or (hint,))
            if value is None:
                assert type(None) in allowed, f"{prefix}{f.name} is None; its annotation {hint} does not allow it"
                continue
            kinds = tuple(t for t in allowed if t is not type(None))
            ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
            assert ok, f"{prefix}{f.name} = {value!r} is a {type(value).__name__}; annotated {hint}"

    check(load_device(name).parts)


def test_a_chip_sees_an_override_through_its_components() -> None:
    base = load_device("aoc48")
    changed = base.with_overrides({"readout.adc_bits": 8, "noise.thermal.temperature_k": 350.0})
    assert (base.parts.readout.adc_bits, changed.parts.readout.adc_bits) == (12, 8)
    assert changed.parts.noise.thermal.temperature_k == 350.0
    assert changed.parts.noise.shot == base.parts.noise.shot


def _dotted_reads(path: Path) -> list[str]:
    """`x["a.b"]` subscript reads with a dotted string key (a profile key) in one module."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)
                and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)
                and "." in node.slice.value and node.slice.value.split(".")[0] in {f.name for f in
                                                                                 dataclasses.fields(Parts)}):
            out.append(f"{path.relative_to(AOCSIM.parent)}:{node.lineno} [{node.slice.value!r}]")
    return out


def test_the_physics_reads_components_not_dotted_keys() -> None:
    # Fault guarded (seen failing with `v["slm.bits"]` put back in programming.program_slm): a dotted read.
    reads = [read for room in PHYSICS for path in sorted((AOCSIM / room).rglob("*.py")) for read in
             _dotted_reads(path)]
    assert not reads, f"dotted profile keys read outside aocsim/hardware/profiles: {reads}"


def test_a_leaf_annotated_with_an_unsupported_type_is_refused_by_name() -> None:
    from aocsim.hardware.profiles.part import spec

    @dataclasses.dataclass(frozen=True)
    class Odd(Part):
        gains: list = spec("a list is not a profile type")  # type: ignore[type-arg]

    with pytest.raises(TypeError, match="expected bool, int, float, str or np.ndarray"):
        list(Odd.leaves())


def test_arrays_stay_read_only_through_the_components() -> None:
    arr = load_device("aoc48").parts.emitter.fan_in_pos
    assert isinstance(arr, np.ndarray) and not arr.flags.writeable
