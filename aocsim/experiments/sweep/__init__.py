"""Sweeps: a declarative spec, a resumable runner (local processes or Dask), one labelled Dataset.

spec.py reads and checks the YAML spec (search_spec.py its search block); run.py runs its points
(`sweep`), or search.py asks them of Optuna round by round; store.py keeps each finished point on
disk and assembles the results; front.py finds Pareto fronts and hypervolumes. See docs/SWEEPS.md.
"""

from aocsim.experiments.sweep.run import sweep
from aocsim.experiments.sweep.spec import SweepSpec, load_spec, parse_spec
from aocsim.experiments.sweep.search import status

__all__ = ["SweepSpec", "load_spec", "parse_spec", "status", "sweep"]
