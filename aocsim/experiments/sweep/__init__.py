"""Sweeps: a declarative spec, a resumable runner (local processes or Dask), one labelled Dataset.

spec.py reads and checks the YAML spec; run.py runs its points (`sweep`); store.py keeps each
finished point on disk and assembles the results. See docs/SWEEPS.md.
"""

from aocsim.experiments.sweep.run import sweep
from aocsim.experiments.sweep.spec import SweepSpec, load_spec, parse_spec
from aocsim.experiments.sweep.store import status

__all__ = ["SweepSpec", "load_spec", "parse_spec", "status", "sweep"]
