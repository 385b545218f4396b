"""`aocsim bench search`: a co-design search's trials per minute, run as populations against point by point.

Each case is one search (NSGA-II, a generation of `batch` trials over SLM bits, ADC bits and light: the
per-load values a population stacks, `tile_product.PER_LOAD`) run twice in this process on the same
workload, once as populations (`sweep(..., batched=True)`: a generation's trials one call,
aocsim/experiments/population.py) and once point by point (a call per trial, as sweeps ran before), in
alternating order after an untimed warm-up search, each starting with every memo empty (its fits are its
own: the memory of one search would otherwise serve the other's); and each trial's cost in exact-path times: the
search's seconds per trial over the exact path's seconds on the same tokens (best of 3, timed in the same
run). Torch on one thread; one local worker, so that the ratio is the batching's alone.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# The cases: a model, its workload (sequences at a multiple of its training length, chips) and the placement
# its trials share. a5-implicit at the placement docs/DEVICE_RUNS.md section 3 recommends.
SEARCH_CASES: dict[str, dict[str, Any]] = {
    "parity-implicit": {"data": {"sequences": 32, "length_factor": 4}, "chips": 1, "placement": {}},
    "a5-implicit": {"data": {"sequences": 8, "length_factor": 4}, "chips": 2,
                    "placement": {"on_tiles": "in_proj,out_proj", "averaging": 16, "predistort": True}},
}
SPACE = {"slm.bits": {"int": [4, 9]}, "readout.adc_bits": {"int": [6, 12]},
         "noise.power_per_unit_w": {"log": [1.0e-5, 1.0e-3]}}


@dataclass(frozen=True)
class SearchBenchRow:
    """One case: its trials, and the seconds of the search batched and point by point and of the exact path."""

    model: str
    trials: int
    batch: int
    sequences: int
    chips: int
    batched_s: float
    point_by_point_s: float
    exact_s: float
    accuracy_agrees: bool  # the two searches' trials reached the same accuracies (same points, same draws)

    def per_minute(self, seconds: float) -> float:
        return 60.0 * self.trials / seconds

    def exact_times(self, seconds: float) -> float:
        """A trial's cost in exact-path times."""
        return seconds / self.trials / self.exact_s

    @property
    def speedup(self) -> float:
        return self.point_by_point_s / self.batched_s


def case_placement(model: str, placement: dict[str, Any] | None = None) -> dict[str, Any]:
    """A case's placement with the options `placement` sets over its own (`aocsim bench search --placement`)."""
    return {**SEARCH_CASES[model]["placement"], **(placement or {})}


def search_spec(model: str, *, trials: int, batch: int, case: dict[str, Any]) -> dict[str, Any]:
    """The YAML spec of one case's search."""
    space: dict[str, Any] = dict(SPACE)
    for name, value in case["placement"].items():
        space[f"placement.{name}"] = {"choice": [value]}
    return {"model": model, "device": "aoc48", "data": case["data"], "seeds": 1, "chips": case["chips"],
            "search": {"objectives": {"accuracy": "max", "energy_j": "min"}, "budget": trials, "batch": batch,
                       "sampler": "nsga2", "seed": 0},
            "space": space, "metrics": ["accuracy", "energy_per_inference_j"]}


def _exact_seconds(model_name: str, case: dict[str, Any]) -> float:
    from aocsim.execute.registry import resolve
    from aocsim.experiments.workloads import default_workload
    from aocsim.hardware.profiles.profile import load_device
    from aocsim.io.model_files import load_model

    model = load_model(model_name)
    w = default_workload(model, **case["data"])
    placed = resolve(model, load_device("aoc48"), case["placement"])
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        placed.cls.exact(model, w.inputs, placed.placement)
        best = min(best, time.perf_counter() - start)
    return best


def bench_search(models: tuple[str, ...] = ("parity-implicit", "a5-implicit"), *, trials: int = 16,
                 batch: int = 8, placement: dict[str, Any] | None = None) -> list[SearchBenchRow]:
    """Each model's case (`SEARCH_CASES`) searched batched and point by point (module docstring), with the
    options `placement` sets over the case's own (`case_placement`: a cheaper calibration, say)."""
    from aocsim.errors import InputError
    from aocsim.experiments.sweep.run import sweep
    from aocsim.hardware.engine.memo import forget_all
    from aocsim.threads import torch_threads

    unknown = [m for m in models if m not in SEARCH_CASES]
    if unknown:
        raise InputError(f"models = {unknown}; expected some of {list(SEARCH_CASES)}")
    rows = []
    with torch_threads(1), tempfile.TemporaryDirectory(prefix="aocsim-bench-search-") as tmp:
        for model in models:
            case = {**SEARCH_CASES[model], "placement": case_placement(model, placement)}
            spec = Path(tmp) / f"{model}.yaml"
            spec.write_text(yaml.safe_dump(search_spec(model, trials=trials, batch=batch, case=case)))
            warm = Path(tmp) / f"{model}-warm.yaml"
            warm.write_text(yaml.safe_dump(search_spec(model, trials=2, batch=2, case=case)))
            sweep(warm, Path(tmp) / f"{model}-warm", batched=True)  # imports, first calls, Optuna
            seconds, accuracy = {}, {}
            for batched in (False, True) if len(rows) % 2 == 0 else (True, False):
                out = Path(tmp) / f"{model}-{batched}"
                forget_all()  # each search fits its points anew, as a fresh process would
                start = time.perf_counter()
                ds = sweep(spec, out, batched=batched)
                seconds[batched] = time.perf_counter() - start
                accuracy[batched] = ds["accuracy"].values.ravel()
                shutil.rmtree(out)
            rows.append(SearchBenchRow(model, trials, batch, case["data"]["sequences"], case["chips"], seconds[True],
                                       seconds[False], _exact_seconds(model, case),
                                       bool((abs(accuracy[True] - accuracy[False]) <= 0.02).all())))
    return rows


def format_search_bench(rows: list[SearchBenchRow]) -> str:
    """The table `aocsim bench search` prints (and the README shows)."""
    head = (f"{'model':<16} {'trials':>6} {'batch':>5} {'seqs x chips':>12} {'batched /min':>12} "
            f"{'one by one /min':>15} {'speed-up':>8} {'trial (exact paths) batched':>27} {'one by one':>10}")
    lines = [head]
    for r in rows:
        lines.append(f"{r.model:<16} {r.trials:>6} {r.batch:>5} {f'{r.sequences} x {r.chips}':>12} "
                     f"{r.per_minute(r.batched_s):>12.1f} {r.per_minute(r.point_by_point_s):>15.1f} "
                     f"{r.speedup:>7.2f}x {r.exact_times(r.batched_s):>27.1f} {r.exact_times(r.point_by_point_s):>10.1f}"
                     + ("" if r.accuracy_agrees else "  (accuracies differ beyond 2 points)"))
    return "\n".join(lines)
