"""Running a sweep: every unfinished point of a spec, on local processes or a Dask cluster.

A point is one `aocsim.compare` run (all chips and seeds of one configuration), reduced to
per-run metrics (`point_metrics`). Its noise seeds derive from the spec's root seed and the
point's key (`spec.noise_seed`), chips are the same simulated chips everywhere, so a point's
numbers do not depend on which worker runs it, in which order, or on how many there are. Each
point is written atomically as it finishes (`store.SweepStore`); a sweep run again with
`resume=True` does only what is missing. See docs/SWEEPS.md.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import xarray as xr

from aocsim.errors import InputError
from aocsim.experiments.metrics import point_metrics as metrics_of
from aocsim.experiments.sweep.fidelity import check_screen, prefix, with_fidelity
from aocsim.experiments.sweep.axes import Axis
from aocsim.experiments.sweep.spec import PLACEMENT, Point, SweepSpec, load_spec, noise_seed
from aocsim.experiments.sweep.search import results, run_search
from aocsim.experiments.sweep.store import SweepStore, write_results

log = logging.getLogger(__name__)
_MODELS: dict[str, Any] = {}  # loaded models, per process


def _model(name: str) -> Any:
    if name not in _MODELS:
        from aocsim.io.model_files import load_model

        _MODELS[name] = load_model(name)
    return _MODELS[name]


def point_workload(model: Any, data: dict[str, int]) -> Any:
    """The workload of a point (`aocsim.experiments.workloads.default_workload`): the first `samples`
    test images of a digits model (default all 450); for a sequence model `sequences` fresh ones
    of `length_factor` times its training length (the workloads' defaults: 32 and 4)."""
    from aocsim.experiments.workloads import default_workload

    task = model.card.get("task")
    if task == "digits" and ("sequences" in data or "length_factor" in data):
        raise InputError(f"data = {data!r}: model {model.card['name']!r} is a digits model; expected {{samples: N}}")
    if task == "state_tracking" and "samples" in data:
        raise InputError(f"data = {data!r}: model {model.card['name']!r} is a sequence model; expected "
                         "{sequences: N, length_factor: F}")
    if task == "digits":
        return default_workload(model, samples=data.get("samples"))
    return default_workload(model, sequences=data.get("sequences"), length_factor=data.get("length_factor"))


def run_point(spec: SweepSpec, base: Any, point: Point, fits: str | None = None) -> xr.Dataset:
    """One point: `aocsim.compare` with the point's profile (`base` with its settings) and placement,
    reduced to metrics; torch on one thread, as on every worker, so that a point's numbers do not
    depend on where it runs. `fits`: a folder of the chips' tile programs and emitter measurements
    shared with the sweep's other points (`aocsim.disk_memo`; None: the machine's calibration store, as on
    a Dask worker, which may not see the sweep's folder). A population of one: `run_population`."""
    return run_population(spec, base, [point], fits)[0][1]


# Points in one call at most: a sweep writes a population's points when it ends, so a killed sweep loses at
# most this many points' work and its progress bar moves at least this often (a search's generation is one).
POPULATION_MOST = 16


def population_key(point: Point) -> tuple:
    """What the points run as one population share (aocsim/experiments/population.py): the model, the
    share of the workload and the chips, the placement and every profile setting but the per-load ones
    (`tile_product.PER_LOAD`), which each point's rows take on their own."""
    from aocsim.hardware.engine.tile_product import PER_LOAD

    shared = sorted((k, repr(v)) for k, v in point.settings.items() if k not in PER_LOAD)
    return (point.model, point.fraction, point.chips, tuple(shared))


def populations(points: list[Point], workers: int, batched: bool = True) -> list[list[Point]]:
    """The points grouped into populations (`population_key`), each cut into about as many parts as there are
    workers (no more than it has points), so that every worker has one, of at most `POPULATION_MOST` points;
    in the points' order. Not
    `batched`: a point each (how sweeps ran before populations; `aocsim bench search` measures both)."""
    if not batched:
        return [[p] for p in points]
    groups: dict[tuple, list[Point]] = {}
    for p in points:
        groups.setdefault(population_key(p), []).append(p)
    out = []
    for group in groups.values():
        parts = min(len(group), max(workers, -(-len(group) // POPULATION_MOST)))
        size = -(-len(group) // parts)
        out += [group[i:i + size] for i in range(0, len(group), size)]
    return out


def run_population(spec: SweepSpec, base: Any, points: list[Point], fits: str | None = None
                   ) -> list[tuple[str, xr.Dataset]]:
    """Points of one population (`population_key`) as one run (`compare_population`: the exact path once,
    the fits together, every point's seeds one batch), each reduced to its metrics as `run_point` gives them."""
    from aocsim import disk_memo
    from aocsim.experiments.compare import compare
    from aocsim.experiments.population import compare_population
    from aocsim.threads import torch_threads

    with torch_threads(1):
        model = _model(points[0].model)
        w = prefix(point_workload(model, spec.data), points[0].fraction)  # a screened trial: the first samples
        profiles, seeds = [], []
        for point in points:
            profiles.append(base.with_overrides({k: v for k, v in point.settings.items() if k not in PLACEMENT}))
            seeds.append([noise_seed(spec.root_seed, point.seeds_of or point.key, s) for s in spec.seeds])
        placement = {k.split(".", 1)[1]: v for k, v in points[0].settings.items() if k in PLACEMENT}
        chips = list(spec.chips[:points[0].chips])  # a screen's first chips (search.fidelity.chips)
        with disk_memo.use(fits) if fits is not None else contextlib.nullcontext():
            if len(points) == 1:
                datasets = [compare(model, profiles[0], w.inputs, w.targets, placement=placement, seeds=seeds[0],
                                    chips=chips, calibration=w.calibration)]
            else:
                datasets = compare_population(model, profiles, w.inputs, w.targets, placement=placement, seeds=seeds,
                                              chips=chips, calibration=w.calibration)
        out = []
        for point, ds in zip(points, datasets):
            one = point_metrics(ds, spec.metrics).assign_coords(seed=list(spec.seeds))
            if spec.search is not None and spec.search.fidelity is not None:
                one = with_fidelity(one, point.fraction, ds.sizes["sample"])
            out.append((point.key, one))
        return out


def point_metrics(ds: xr.Dataset, metrics: tuple[str, ...]) -> xr.Dataset:
    """Per chip and seed: the metrics of a `compare` Dataset (`aocsim.experiments.metrics`), and compare's
    verdict on the point: `trusted` (1 or 0) and its `warnings` (one note per line, "" when trusted;
    aocsim/experiments/trust.py)."""
    out = metrics_of(ds, metrics)
    out["trusted"] = ((), np.int8(ds.attrs.get("trusted", 1)))
    out["warnings"] = ((), str(ds.attrs.get("warnings", "")))
    return out


def _job(spec: SweepSpec, base: Any, points: list[Point], fits: str | None = None) -> list[tuple[str, xr.Dataset]]:
    return run_population(spec, base, points, fits)


def _warm(models: tuple[str, ...]) -> None:
    """A spawned worker's start-up (`aocsim.parallel.Workers`): what a cold process does in its first point
    (about 3 s more than in the next), so that the worker takes a point only when it can run it at speed."""
    import torch._dynamo  # noqa: F401 - torch.optim (the fits' L-BFGS) imports it on its first step: 1.7 s

    import aocsim.experiments.compare  # noqa: F401

    xr.Dataset({"x": ("i", np.zeros(1))})  # xarray looks for dask on its first array (0.7 s where installed)
    for name in models:
        _model(name)


def _local(spec: SweepSpec, base: Any, todo: list[Point], pool: Any, fits: str, batched: bool = True
           ) -> Iterator[tuple[str, xr.Dataset]]:
    from aocsim.parallel import run_parts

    groups = populations(todo, pool.workers, batched)
    for _, finished in run_parts(_job, [(spec, base, g, fits) for g in groups], pool):
        yield from finished


def connect(scheduler: str) -> Any:
    """A Dask client of the scheduler at `scheduler` (tcp://HOST:PORT), or a one-line error."""
    try:
        from distributed import Client
    except ImportError:
        raise InputError("--scheduler needs Dask distributed; install it with pip install 'aocsim[distributed]'") \
            from None
    try:
        return Client(scheduler, timeout="5s", set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise InputError(f"--scheduler {scheduler}: cannot reach it ({type(exc).__name__}); expected a running "
                         "Dask scheduler at tcp://HOST:PORT") from None


def _dask(client: Any, spec: SweepSpec, base: Any, todo: list[Point], batched: bool = True
          ) -> Iterator[tuple[str, xr.Dataset]]:
    from distributed import as_completed

    # A Dask worker runs one task per thread it has; each task runs torch on one thread (run_population).
    slots = max(1, sum(client.nthreads().values()))
    futures = [client.submit(_job, spec, base, g, key=f"aocsim-point-{g[0].key}", pure=False)
               for g in populations(todo, slots, batched)]
    try:
        for future in as_completed(futures, loop=client.loop):
            yield from future.result()
    finally:
        for f in futures:
            f.cancel()


def sweep(spec: SweepSpec | str | Path, out: str | Path, *, workers: int = 1, scheduler: str | Any | None = None,
          resume: bool = False, overwrite: bool = False, progress: bool = False, batched: bool = True) -> xr.Dataset:
    """Run every unfinished point of `spec` and write `out/results.nc`; returns the Dataset.

    Args:
        spec: a `SweepSpec`, or the path of a YAML spec (`load_spec`).
        out: the sweep's folder (created; see `store`).
        workers: local processes (this one and `workers - 1` spawned), ignored with `scheduler`.
        scheduler: a Dask scheduler address (tcp://HOST:PORT) or a `distributed.Client`.
        resume: finish a sweep in `out` (the same spec, device profile and models); overwrite: start
            it again (removing only the sweep's own files).
        progress: a progress bar with ETA over the points.
        batched: points that differ only in per-load profile values run as populations, one call per
            population part (`populations`; aocsim/experiments/population.py); False: a call per point.

    Every point runs torch on one thread (the many small operations of a solve scale over processes,
    not threads; and a point's numbers then never depend on where it ran).
    """
    from aocsim._checks import integer
    from aocsim.hardware.profiles.profile import load_device
    from aocsim.progress import bar

    spec = spec if isinstance(spec, SweepSpec) else load_spec(spec)
    workers = integer(workers, "workers", minimum=1)
    base = load_device(spec.profile)  # read once: every point uses this profile
    check_models(spec, base)
    store = SweepStore(out)
    client = None
    if scheduler is not None:  # before touching the folder: an unreachable scheduler loses nothing
        client = connect(scheduler) if isinstance(scheduler, str) else scheduler
    info = provenance(spec, base)
    store.prepare(spec, fingerprint(info), resume=resume, overwrite=overwrite)

    pools: list[Any] = []  # the local workers, started once for all the points (a search's rounds too)

    def evaluate(points: list[Point]) -> Iterator[tuple[str, xr.Dataset]]:
        if client is not None:
            return _dask(client, spec, base, points, batched)
        if not pools:
            from aocsim.parallel import Workers

            size = spec.search.batch if spec.search is not None else len(points)
            pools.append(Workers(min(workers, size), warm=_warm, args=(spec.models,)))
        return _local(spec, base, points, pools[0], str(store.fits), batched)  # Dask workers may not see the folder

    try:
        if spec.search is not None:
            run_search(spec, store, evaluate, progress=progress)
        else:
            done = store.done()
            todo = [p for p in spec.points() if p.key not in done]
            log.info("sweep: %d of %d points to run", len(todo), len(todo) + len(done))
            for key, ds in bar(evaluate(todo), desc="sweep points", total=len(todo), enabled=progress):
                store.write_point(key, ds)
    finally:
        for pool in pools:
            pool.close()
        if client is not None and isinstance(scheduler, str):
            client.close()
    ds = results(spec, store, info)
    write_results(ds, store)
    return ds


def check_models(spec: SweepSpec, base: Any) -> None:
    """Every model loads, has inputs for the spec's data, and takes the swept placement settings on
    `base`: each swept option must apply to the model's kind (aocsim/execute/placement.py)."""
    from aocsim.execute.placement import DECLARATIONS, kinds_words
    from aocsim.execute.registry import placement_class, resolve

    for name in spec.models:
        model = _model(name)
        w = point_workload(model, spec.data)
        if spec.search is not None and spec.search.fidelity is not None:
            check_screen(len(w.inputs), spec.search.fidelity)
        kind = placement_class(model, base).kind
        for path in (p for a in spec.axes for p in a.values if p in PLACEMENT):
            kinds = DECLARATIONS[path.split(".", 1)[1]].kinds
            if kind not in kinds:
                raise InputError(f"{path} is swept but model {name!r} runs as a {kind} on {base.name}; expected it "
                                 f"only for {kinds_words(kinds)}")
        for placement in swept_placements(spec):  # every check placing makes, before any point runs
            try:
                resolve(model, base, {k.split(".", 1)[1]: v for k, v in placement.items()})
            except InputError as exc:
                where = ", ".join(f"{k} = {v!r}" for k, v in placement.items())
                raise InputError(f"at {where}: {exc}" if where else str(exc)) from None


def swept_placements(spec: SweepSpec) -> list[dict[str, Any]]:
    """The placement settings the spec's points take: each distinct one of a grid's, or every corner of a
    search's placement space (its ranges' ends, its choices), as `check_points` reads a search's profiles."""
    axes = [a for a in spec.axes if any(p in PLACEMENT for p in a.values)]
    if spec.search is not None:
        axes = [Axis(p.path, {p.path: p.bounds}) for p in spec.search.space if p.path in PLACEMENT]
    combos = itertools.product(*(range(len(a)) for a in axes))
    settings = [{p: v[i] for a, i in zip(axes, index) for p, v in a.values.items() if p in PLACEMENT}
                for index in combos]
    return list({json.dumps(s, sort_keys=True, default=str): s for s in settings}.values())


def fingerprint(info: dict[str, str]) -> str:
    """What a resumed sweep must find unchanged: the device profile's and models' checksums."""
    return f"{info['device_sha256']}; {info['model_sha256']}"


def provenance(spec: SweepSpec, base: Any) -> dict[str, str]:
    import hashlib

    from aocsim._version import __version__
    from aocsim.experiments.results import model_checksum

    return {"aocsim_version": __version__,
            "device_sha256": hashlib.sha256(base.to_json().encode()).hexdigest(),
            "model_sha256": ", ".join(f"{m}: {model_checksum(_model(m))}" for m in spec.models)}
