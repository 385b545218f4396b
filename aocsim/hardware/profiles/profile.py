"""Device profiles: load, inherit, override and validate (`aocsim.load_device`).

A profile file is either complete (every key of `aocsim.hardware.profiles.schema`) or
a variant: `base: NAME` plus `overrides:` (dotted keys). Validation rejects
unknown keys, missing keys, wrong types, wrong shapes and out-of-range values
with a `ProfileError` naming the file, the dotted key and what was expected.
"""

from __future__ import annotations

import copy

import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np
import yaml

from aocsim.errors import ProfileError, UnknownNameError
from aocsim.hardware.profiles.checks import _plain, check_complete, suggest
from aocsim.hardware.profiles.parts import Parts
from aocsim.hardware.profiles.schema import BY_KEY, flatten, unflatten
from aocsim.paths import devices_dir

VARIANT_KEYS = {"name", "description", "provenance", "base", "overrides"}


def _rebuild(name: str, values: dict[str, Any], origin: str | None, overrides: dict[str, Any]) -> "DeviceProfile":
    """A `DeviceProfile` from its pickled parts: mappings frozen, arrays read-only again."""
    for value in values.values():
        if isinstance(value, np.ndarray):
            value.flags.writeable = False
    return DeviceProfile(name, MappingProxyType(values), origin, MappingProxyType(overrides))


@dataclass(frozen=True)
class DeviceProfile:
    """A validated, read-only device profile.

    Attributes:
        name: profile name.
        values: {dotted key: value}; arrays are read-only float64 numpy arrays.
        origin: the file it came from (None if built in memory).
        overrides: the user overrides applied on top of the file.
    """

    name: str
    values: Mapping[str, Any]
    origin: str | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        if key not in self.values:
            raise UnknownNameError("profile key", key, list(self.values))
        return self.values[key]

    @property
    def channels(self) -> int | None:
        return self.values["channels"]

    @cached_property
    def parts(self) -> Parts:
        """The device's typed components, built once from the values (aocsim/hardware/profiles/parts.py):
        what the physics reads."""
        return Parts.from_values(self.values)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled as plain data (worker processes receive profiles); rebuilt read-only."""
        return _rebuild, (self.name, dict(self.values), self.origin, dict(self.overrides))

    def with_overrides(self, overrides: Mapping[str, Any]) -> "DeviceProfile":
        """A new profile with dotted-key overrides applied and validated."""
        flat = dict(self.values)
        _apply_overrides(flat, overrides, "overrides")
        check_complete(flat, "overrides")
        return DeviceProfile(flat["name"], MappingProxyType(flat), self.origin,
                             MappingProxyType({**self.overrides, **overrides}))

    def to_dict(self) -> dict[str, Any]:
        """Nested plain-Python mapping (YAML / JSON ready): `load` of it gives this profile back."""
        return unflatten({k: _plain(v) for k, v in self.values.items()})

    def to_json(self) -> str:
        """The full profile as compact JSON (for provenance attributes of results)."""
        return json.dumps(self.to_dict(), separators=(",", ":"))


def available_devices() -> list[str]:
    """Names of the bundled device profiles."""
    return sorted(p.stem for p in devices_dir().glob("*.yaml"))


def _resolve(name_or_path: str | Path) -> Path:
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise ProfileError(f"{path}: profile file not found")
        return path
    bundled = devices_dir() / f"{name_or_path}.yaml"
    if bundled.is_file():
        return bundled
    raise UnknownNameError("device profile", str(name_or_path), available_devices())


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads 1e-4 and 5E+7 as floats (YAML 1.1 wants a dot in them)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def read_value(text: str) -> Any:
    """One value written as in a profile file (YAML with 5e7-style floats), e.g. from `--set KEY=VALUE`."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)


def _plain_scalar(value: Any) -> Any:
    """numpy scalars (np.int64(6), np.float32(0.1), np.bool_) as the Python values they hold."""
    if isinstance(value, np.generic):
        return value.item()
    return value


_PARSED: dict[str, tuple[bytes, dict[str, Any]]] = {}  # each file's YAML as last read: its bytes and mapping


def _read_yaml(path: Path) -> dict[str, Any]:
    """The file's mapping (a copy), parsed again only when its bytes have changed: a compare or sweep
    loads its profile for every model and part, and parsing costs a tenth of a second, reading it
    microseconds."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read ({exc})") from None
    name = str(path.resolve())
    if name not in _PARSED or _PARSED[name][0] != raw:
        _PARSED[name] = (raw, _parse_yaml(path, raw))
    return copy.deepcopy(_PARSED[name][1])


def _parse_yaml(path: Path, text: bytes) -> dict[str, Any]:
    try:
        raw = yaml.load(text.decode(), Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        raise ProfileError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{path}: cannot read ({exc})") from None
    if not isinstance(raw, dict):
        raise ProfileError(f"{path}: expected a mapping of profile keys, got {type(raw).__name__}")
    return raw


def _apply_overrides(flat: dict[str, Any], overrides: Mapping[str, Any], where: str) -> None:
    if not isinstance(overrides, Mapping):
        raise ProfileError(f"{where}: expected a mapping of dotted keys to values, got {type(overrides).__name__}")
    for key, value in overrides.items():
        if key not in BY_KEY:
            raise ProfileError(f"{where}: unknown key {key!r}{suggest(str(key))}")
        flat[key] = _plain_scalar(value)


def _load_flat(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Read a profile file (following `base:` chains) into an unvalidated flat mapping."""
    if path.resolve() in seen:
        raise ProfileError(f"{path}: base profiles form a cycle")
    raw = _read_yaml(path)
    if "base" not in raw:
        return flatten(raw)
    extra = sorted(set(raw) - VARIANT_KEYS)
    if extra:
        raise ProfileError(f"{path}: unknown key {extra[0]!r} in a variant (allowed: {sorted(VARIANT_KEYS)})")
    flat = _load_flat(_resolve(raw["base"]), seen + (path.resolve(),))
    own = {k: raw[k] for k in ("name", "description") if k in raw}
    own.update(flatten({"provenance": raw.get("provenance", {})}))
    _apply_overrides(flat, own, str(path))
    _apply_overrides(flat, raw.get("overrides") or {}, str(path))
    return flat


def load_device(name_or_path: str | Path, overrides: Mapping[str, Any] | None = None) -> DeviceProfile:
    """Load a device profile by bundled name (`aocsim devices list`) or YAML path.

    Args:
        name_or_path: "ideal", "aoc48-twin", "aoc48", ... or a path to a .yaml file.
        overrides: dotted keys to replace, e.g. {"slm.bits": 6, "crosstalk.pbs.enabled": True}.

    Returns:
        A validated, read-only `DeviceProfile`.

    Example:
        >>> dev = load_device("aoc48", overrides={"slm.bits": 6})
        >>> dev["slm.bits"]
        6
    """
    from aocsim.errors import InputError  # a guard of the reliability pass (issue 12), kept local to it

    if not isinstance(name_or_path, (str, Path)) or not str(name_or_path).strip() \
            or any(len(part.encode()) > 255 for part in Path(name_or_path).parts):  # longer: an OSError
        raise InputError(f"name_or_path = {repr(name_or_path)[:60]}; expected a device profile name "
                         f"({', '.join(available_devices())}) or a path to a .yaml file")
    path = _resolve(name_or_path)
    flat = _load_flat(path)
    check_complete(flat, str(path))
    profile = DeviceProfile(flat["name"], MappingProxyType(flat), str(path))
    return profile.with_overrides(overrides) if overrides else profile


def profile_from_dict(tree: Mapping[str, Any], *, where: str = "<dict>") -> DeviceProfile:
    """Validate a nested (or flat dotted) mapping as a complete profile."""
    if not isinstance(tree, Mapping):
        raise ProfileError(f"{where}: expected a mapping of profile keys, got {type(tree).__name__}")
    flat = flatten(dict(tree))
    check_complete(flat, where)
    return DeviceProfile(flat["name"], MappingProxyType(flat), None)
