"""Fixed-point solving: one entry point, solver strategies, backward modes."""

from aocsim.solve.backward import Implicit, Phantom, Unrolled, equilibrium
from aocsim.solve.core import NoisyMap, RowMap, solve
from aocsim.solve.result import SolveResult, SolveStatus
from aocsim.solve.solvers import Anderson, Picard, available_solvers, make_solver

__all__ = [
    "Anderson", "Implicit", "NoisyMap", "Phantom", "Picard", "RowMap", "SolveResult", "SolveStatus", "Unrolled",
    "available_solvers", "equilibrium", "make_solver", "solve",
]
