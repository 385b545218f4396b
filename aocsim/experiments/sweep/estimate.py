"""How long a sweep will take, roughly, before anything runs (`aocsim sweep` asks for --yes above 1000 points).

The estimate is a documented rough figure, not a measurement of this machine: one worker on the
2-core development machine with the other core busy (`run_point` timed in 2026-12, docs/SWEEPS.md
section 2) spent per chip a setup (compiling or fitting tile programs) and per chip x seed run a
time per inference:

| model | setup per chip | per inference and run |
|---|---|---|
| DEQ (digits) | 0.5 s | 1.5 ms per test image |
| implicit SSM (parity) | 5 s | 6 ms per token |

A point is all its chips and seeds; points share out over the workers. Larger models (a5-implicit)
and tiled placements take longer than these figures; an idle machine, less.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SETUP_S = {"digits": 0.5, "state_tracking": 5.0}
PER_INFERENCE_S = {"digits": 1.5e-3, "state_tracking": 6e-3}


@dataclass(frozen=True)
class Estimate:
    """The size of the work left and its rough duration on `workers` workers."""

    points: int
    chips: int
    seeds: int
    seconds: float
    workers: int

    def describe(self) -> str:
        """'1152 points x 1 chips x 2 seeds; about 2.1 hours on 2 workers (a rough figure: ...)'."""
        s = self.seconds
        when = f"{s / 3600:.1f} hours" if s >= 5400 else f"{max(s, 1) / 60:.1f} minutes"
        return (f"{self.points} points x {self.chips} chips x {self.seeds} seeds; about {when} on {self.workers} "
                f"workers (a rough figure: aocsim/experiments/sweep/estimate.py)")


def inferences(card: dict[str, Any], data: dict[str, int]) -> int:
    """The inferences one run of a point makes: test images of a digits model (default 450), tokens of a
    sequence model (sequences x length_factor x its training length; the workloads' defaults, 32 and 4)."""
    if card.get("task") == "state_tracking":
        from aocsim.experiments.workloads import LENGTH_FACTOR, SEQUENCES

        length = data.get("length_factor", LENGTH_FACTOR) * int(card["data"]["train_length"])
        return data.get("sequences", SEQUENCES) * length
    return data.get("samples", 450)


def estimate(spec: Any, points: int, workers: int) -> Estimate:
    """The rough duration of `points` points of `spec` (each of its models alike) on `workers` workers."""
    from aocsim.io.model_files import read_card, resolve_model_dir

    per_model = []
    for name in spec.models:
        card = read_card(resolve_model_dir(name))
        task = "state_tracking" if card.get("task") == "state_tracking" else "digits"
        runs = len(spec.chips) * len(spec.seeds)
        per_model.append(len(spec.chips) * SETUP_S[task] + runs * inferences(card, spec.data) * PER_INFERENCE_S[task])
    per_point = sum(per_model) / len(per_model)
    return Estimate(points, len(spec.chips), len(spec.seeds), points * per_point / max(workers, 1), workers)
