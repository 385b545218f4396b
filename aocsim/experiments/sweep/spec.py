"""A sweep spec (YAML): which models, on which device, over which parameter values; validated up front.

    model: digits-deq48                 # a bundled name or model folder, or a list of them
    device: aoc48                       # the base profile; every point overrides some of its keys
    data: {samples: 240}                # digits: the first N test images; sequence models:
                                        #   {sequences: 16, length_factor: 4}
    axes:                               # crossed as a grid, one dimension each
      slm.bits: [4, 6, 9]
      readout.adc_bits: [6, 8, 12]
    zip:                                # optional: lists of one length, varied together (dimension "zip")
      noise.multiplier: [1, 4]
      noise.power_per_unit_w: [1.0e-5, 1.0e-4]
    random:                             # optional: points drawn in a box (dimension "draw")
      method: latin_hypercube           # or uniform
      points: 8
      seed: 0
      ranges: {noise.multiplier: {low: 1, high: 64, scale: log}}
    seeds: 3                            # noise seeds per point: a count or a list of indices
    chips: 2                            # simulated chips (variation.chip_seed): a count or a list
    root_seed: 0                        # every point's noise streams derive from it and the point's key
    metrics: [accuracy, agreement]      # optional: a subset of METRICS (default all)
    search: {...}                       # instead of axes, zip and random: a co-design search over
    space: {...}                        #   `space` (search_spec.py; docs/SWEEPS.md section 6)

A parameter path is a device profile key (devices/SCHEMA.md) or a placement setting
(`PLACEMENT`). Every point's profile is built and validated when the spec is read, so a value
out of the schema's range is refused before any work, with the profile's own one-line message.
See docs/SWEEPS.md.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from aocsim.errors import AocsimError, InputError, ProfileError
from aocsim.execute.placement import DECLARATIONS
from aocsim.experiments.metrics import METRICS
from aocsim.experiments.sweep.axes import Axis, count, drawn, mapping, short, zipped
from aocsim.experiments.sweep.axes import values as axis_values
from aocsim.experiments.sweep.search_spec import Search, metric_name, parse_search
from aocsim.hardware.profiles.profile import _Loader

TOP_KEYS = ("model", "device", "data", "axes", "zip", "random", "search", "space", "seeds", "chips", "root_seed",
            "metrics")
# Placement settings a sweep can vary: `placement.NAME` for every option declared in
# aocsim/execute/placement.py (how a model is put on the device, not the device itself).
PLACEMENT = {f"placement.{name}": d.help for name, d in DECLARATIONS.items()}
# The metrics (aocsim/experiments/metrics.py declares each once); those of one kind of model are named, never defaults.
LANGUAGE_METRICS = tuple(m for m, d in METRICS.items() if d.task == "language")
REGRESSION_METRICS = tuple(m for m, d in METRICS.items() if d.task == "regression")
CLASS_METRICS = tuple(m for m, d in METRICS.items() if d.task == "classes")  # answers that are classes
DATA_KEYS = {"samples", "sequences", "length_factor"}


@dataclass(frozen=True)
class Point:
    """One configuration: a model and parameter values; `index` places it in the Dataset."""

    model: str
    settings: dict[str, Any]
    index: tuple[int, ...]  # model, then one index per axis
    key: str  # a hash of the resolved configuration (`point_key`): its file's name
    seeds_of: str = ""  # the key its noise seeds derive from ("": its own); a screened trial's is its full point's
    fraction: float = 1.0  # the share of the workload's samples it runs, the first ones (search.fidelity.screen)
    chips: int | None = None  # the spec's chips it runs, the first ones (search.fidelity.chips); None: all


@dataclass(frozen=True)
class SweepSpec:
    models: tuple[str, ...]
    device: str
    data: dict[str, int]
    axes: tuple[Axis, ...]
    seeds: tuple[int, ...]
    chips: tuple[int, ...]
    root_seed: int
    metrics: tuple[str, ...]
    source: dict[str, Any] = field(repr=False)
    device_path: str = ""  # the profile to load: `device`, a relative .yaml path resolved against the spec's folder
    search: Search | None = None  # a co-design search over `search.space` instead of a grid (search_spec.py)

    @property
    def profile(self) -> str:
        """What `load_device` reads: a bundled name, or the profile file (`device_path`)."""
        return self.device_path or self.device

    def points(self) -> list[Point]:
        """Every (model, coordinates) of the grid, in a fixed order."""
        out = []
        for mi, model in enumerate(self.models):
            for index in itertools.product(*(range(len(a)) for a in self.axes)):
                settings = {p: a.values[p][i] for a, i in zip(self.axes, index) for p in a.values}
                out.append(Point(model, settings, (mi, *index), point_key(self, model, settings)))
        return out

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.models), *(len(a) for a in self.axes))

    def text(self) -> str:
        """The spec as canonical JSON (provenance, and the check that a resumed sweep is the same one)."""
        return json.dumps(self.source, sort_keys=True, default=str)


def point_key(spec: SweepSpec, model: str, settings: Mapping[str, Any]) -> str:
    """16 hex digits of SHA-256 over what decides a point's results: model, device, data, its
    settings, seeds, chips and root seed (so a point is found again after a crash, and changes
    when anything that decides its numbers changes)."""
    what = {"model": model, "device": spec.device, "data": spec.data, "settings": dict(sorted(settings.items())),
            "seeds": list(spec.seeds), "chips": list(spec.chips), "root_seed": spec.root_seed}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16]


def noise_seed(root_seed: int, key: str, seed: int) -> int:
    """The noise seed of seed index `seed` at the point with key `key`: 60 bits of SHA-256."""
    return int(hashlib.sha256(f"{root_seed}:{key}:{seed}".encode()).hexdigest()[:15], 16)


# -- reading and checking ---------------------------------------------------------------------------

def load_spec(source: str | Path | Mapping[str, Any]) -> SweepSpec:
    """Read a spec from a YAML file (or a mapping) and check all of it; one-line `InputError`s."""
    if isinstance(source, Mapping):
        raw, where = dict(source), "spec"
    else:
        path = Path(source)
        if not path.is_file():
            raise InputError(f"spec = {str(path)!r}: no such file; expected a sweep spec (YAML)")
        try:
            raw = yaml.load(path.read_text(), Loader=_Loader)  # noqa: S506 (a SafeLoader: 1e-5 is a number)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            at = f" at line {mark.line + 1}" if mark is not None else ""
            raise InputError(f"spec {path}: not valid YAML{at}; expected a mapping of {', '.join(TOP_KEYS)}") from None
        where = str(path)
    return parse_spec(raw, where=where, folder=None if isinstance(source, Mapping) else Path(source).parent)


def parse_spec(raw: Any, *, where: str = "spec", check: bool = True, folder: Path | None = None) -> SweepSpec:
    """A spec from its mapping; `check` builds and validates every point's profile (`check_points`).
    `folder`: where the spec file lies; a relative profile path (`device: my48.yaml`) is read from there,
    not from the current directory (the spec keeps the path as written, so its points' keys do not
    depend on where it lies)."""
    if not isinstance(raw, dict):
        raise InputError(f"{where}: a {type(raw).__name__}; expected a mapping with keys {', '.join(TOP_KEYS)}")
    unknown = [k for k in raw if k not in TOP_KEYS]
    if unknown:
        raise InputError(f"{where}: unknown key {unknown[0]!r}; expected keys among {', '.join(TOP_KEYS)}")
    for required in ("model", "device"):
        if required not in raw:
            raise InputError(f"{where}: missing key {required!r}")
    models = _models(raw["model"])
    device = raw["device"]
    if not isinstance(device, str) or not device:
        raise InputError(f"device = {device!r}; expected a profile name or a profile file path")
    data = _data(raw.get("data", {}))
    axes = [Axis(path, {path: axis_values(f"axes.{path}", v)}) for path, v in mapping("axes", raw.get("axes", {})).items()]
    for block in ("zip", "random"):
        if block in raw and not (isinstance(raw[block], dict) and raw[block]):
            raise InputError(f"{block} = {short(raw[block])}; expected a non-empty mapping (or no {block} key)")
    if "zip" in raw:
        axes.append(zipped(raw["zip"]))
    if "random" in raw:
        axes.append(drawn(raw["random"]))
    search = _search(raw, models, axes)
    paths = [p for a in axes for p in a.values]
    repeated = sorted({p for p in paths if paths.count(p) > 1})
    if repeated:
        raise InputError(f"parameter {repeated[0]!r} is swept twice; expected each path under one of axes, zip, random")
    chips = _ids("chips", raw.get("chips", 1))
    screen_chips = None if search is None or search.fidelity is None else search.fidelity.chips
    if screen_chips is not None and len(chips) < 2:
        raise InputError(f"search.fidelity.chips = {screen_chips} with chips = {short(raw.get('chips', 1))}: a screen "
                         "on fewer chips needs a spec of 2 or more chips; expected no search.fidelity.chips")
    if screen_chips is not None and screen_chips >= len(chips):
        raise InputError(f"search.fidelity.chips = {screen_chips}; expected fewer than the spec's {len(chips)} chips "
                         f"({list(chips)}): a screen runs on the first ones (no chips key: on every chip)")
    spec = SweepSpec(models, device, data, tuple(axes), _ids("seeds", raw.get("seeds", 1)),
                     chips, count("root_seed", raw.get("root_seed", 0)),
                     _metrics(raw.get("metrics"), search), source=raw, device_path=_device_path(device, folder),
                     search=search)
    if check:
        check_points(spec)
    return spec


def _device_path(device: str, folder: Path | None) -> str:
    """A relative profile file path (.yaml, .yml) against the spec's folder; a name or an absolute path as is."""
    path = Path(device)
    if folder is None or path.suffix not in (".yaml", ".yml") or path.is_absolute():
        return device
    return str((folder / path).resolve())


def _models(value: Any) -> tuple[str, ...]:
    models = [value] if isinstance(value, str) else value
    if not isinstance(models, list) or not models or not all(isinstance(m, str) and m for m in models):
        raise InputError(f"model = {short(value)}; expected a model name or folder, or a non-empty list of them")
    if len(set(models)) != len(models):
        raise InputError(f"model = {short(value)}; expected distinct models")
    return tuple(models)


def _data(value: Any) -> dict[str, int]:
    data = mapping("data", value)
    unknown = [k for k in data if k not in DATA_KEYS]
    if unknown:
        raise InputError(f"data.{unknown[0]} is not a data setting; expected {', '.join(sorted(DATA_KEYS))}")
    return {k: count(f"data.{k}", v, minimum=1) for k, v in data.items()}


def _ids(name: str, value: Any) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise InputError(f"{name} = {value!r}; expected a count >= 1 or a list of distinct integers >= 0")
        return tuple(range(value))
    ok = isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                                   for v in value)
    if not ok or len(set(value)) != len(value):
        raise InputError(f"{name} = {short(value)}; expected a count >= 1 or a list of distinct integers >= 0")
    return tuple(value)


def _search(raw: dict[str, Any], models: tuple[str, ...], axes: list[Axis]) -> Search | None:
    """The search block (search_spec.py), which replaces the grid: one model, no axes."""
    if "search" not in raw:
        if "space" in raw:
            raise InputError("space is given without search; expected a search block (or axes for a grid)")
        return None
    if axes:
        raise InputError(f"search and {axes[0].dim if axes[0].dim in ('zip', 'draw') else 'axes'} together; "
                         "expected a search over space, or a grid")
    if len(models) != 1:
        raise InputError(f"model = {short(list(models))}: a search runs one model; expected one name")
    return parse_search(raw["search"], raw.get("space"), tuple(METRICS))


def _metrics(value: Any, search: Search | None = None) -> tuple[str, ...]:
    if value is None:
        return tuple(m for m, d in METRICS.items() if d.default)
    if not isinstance(value, list) or not value:
        raise InputError(f"metrics = {short(value)}; expected a list among {', '.join(METRICS)}")
    metrics = [metric_name(m, "metrics", tuple(METRICS)) for m in value]
    missing = [m for m in (search.metrics if search else ()) if m not in metrics]
    if missing:
        raise InputError(f"metrics lacks {missing[0]!r}, which the search reads; expected it among the metrics")
    return tuple(dict.fromkeys(metrics))


def check_points(spec: SweepSpec) -> None:
    """Every parameter path known, and every point's profile valid (schema ranges and relations)."""
    from aocsim.hardware.profiles.profile import load_device
    from aocsim.hardware.profiles.checks import suggest
    from aocsim.hardware.profiles.schema import BY_KEY
    from aocsim.io.model_files import read_card, resolve_model_dir

    if spec.search is not None:  # the corners of the box (schema ranges are intervals)
        spec = dataclasses.replace(spec, axes=tuple(Axis(p.path, {p.path: p.bounds}) for p in spec.search.space))
    for axis in spec.axes:
        for path, values in axis.values.items():
            if path in PLACEMENT:
                _check_placement(path, values)
            elif path == "variation.chip_seed":
                raise InputError("variation.chip_seed is swept; expected the chips under chips: (every point runs "
                                 "those chips, so an axis of them would have no effect)")
            elif path not in BY_KEY or path in ("name", "description", "channels") or path.startswith("provenance."):
                hint = suggest(path) if not path.startswith("placement.") else ""
                raise InputError(f"unknown parameter {path!r}{hint}; expected a device profile key (devices/SCHEMA.md) "
                                 f"or one of {', '.join(PLACEMENT)}")
    for model in spec.models:
        task = read_card(resolve_model_dir(model)).get("task")
        for metrics, fits, what in ((LANGUAGE_METRICS, task == "language", "language models (charlm-*) only"),
                                    (REGRESSION_METRICS, task == "regression", "regressions (regression-twin*) only"),
                                    (CLASS_METRICS, task != "regression", "models whose answers are classes; name "
                                     f"the regression's metrics under metrics: ({', '.join(REGRESSION_METRICS)}, ...)")):
            asked = [m for m in spec.metrics if m in metrics]
            if asked and not fits:
                raise InputError(f"metrics has {asked[0]!r}, but model {model!r} has task {task!r}; expected {what}")
    try:
        base = load_device(spec.profile)
    except AocsimError as exc:
        raise InputError(f"device = {spec.device!r}: {exc}") from None
    seen: set[str] = set()
    for point in spec.points():
        device_settings = {k: v for k, v in point.settings.items() if k not in PLACEMENT}
        marker = json.dumps(device_settings, sort_keys=True, default=str)
        if marker in seen:
            continue
        seen.add(marker)
        try:
            base.with_overrides(device_settings)
        except ProfileError as exc:
            raise InputError(f"at {_describe(device_settings)}: {exc}") from None


def _check_placement(path: str, values: tuple[Any, ...]) -> None:
    """Each value read by the option's own declaration (one-line InputError naming the sweep key)."""
    name = path.split(".", 1)[1]
    for v in values:
        DECLARATIONS[name].read(path, v)


def _describe(settings: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} = {v!r}" for k, v in settings.items()) or "the base profile"
