"""What to program onto optical tiles so that they compute a given matrix (`fit_tile_program`).

On a calibrated machine a tile does not compute the matrix it holds: measured on aoc48-twin with
small drives, the effective matrix A (node volts per volt of drive, from least squares over random
probes) relates to the programmed W_p entry by entry with ratios from about 0.09 to 0.18 (median
0.136, the absolute convention's small-signal gain), a smooth gain profile across the emitters
(0.5 to 1.25 of the median), different gains for positive and negative weights (the two LED paths),
and a dead input channel (8). No per-output correction absorbs that (a per-output
affine fit leaves 47 % error). What a machine's calibration does instead:

1. **dead channels**: probe the tiles with W itself; an input position (channel index within a tile)
   whose median gain is below `DEAD_GAIN` of the others carries no input (W gets a zero column
   there and the inputs move to the next live position).
2. **separable gains**: per output j a gain c_j (median over k of A_jk / W_jk), per input column a gain
   b_k (median over j of A_jk / (c_j W_jk)); program W_p = W / b.
3. **closed-loop correction**: `rounds` times, load W_p (each load its own programming draws), measure
   A, and move W_p by `DAMPING` (c W - A) / (c b); keep the program with the smallest measured error.
   The target is c_j W_jk, which a per-output gain then undoes. Full steps (damping 1) take a 40 x 60
   random matrix on aoc48-twin from 19 % to 0.3 % in 4 rounds, but diverge after 3 rounds on the
   296 x 64 input projection of a5-implicit on aoc48 (crosstalk: the update is a Jacobi step);
   damping 0.3 brings that one from 29 % to 3 % in 8 rounds. A column whose error grows from one
   round to the next goes back to its previous program and halves its step: with one damping
   for all, a weak column of a5-implicit's output projection overshoots and diverges (the matrix
   error falls from 37 % to 18 %, then grows again); per column it ends near 6 %.

The final load of `DeviceLinear` (aocsim/execute/device_linear.py) is a fresh one, as on a machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from aocsim._numerics import least_squares
from aocsim.execute.option_groups import FIT_PROBES, FIT_ROUNDS
from aocsim.hardware.engine import keys
from aocsim.hardware.profiles.profile import DeviceProfile
from aocsim.hardware.engine.machine import Mount
from aocsim.hardware.engine.tile_product import LoadStack
from aocsim.hardware.engine.tiles import TiledMatrix

DEAD_GAIN = 0.2  # an input position below this fraction of the median input gain is unused
DAMPING = 0.3  # of each correction: the update is a Jacobi step, and crosstalk makes full steps diverge
SIGNIFICANT = 0.1  # weights below this fraction of their row's largest do not estimate gains


@dataclass(frozen=True)
class TileProgram:
    """weight [M, K'] to program (zero columns at dead positions); columns [K]: the column of input k;
    out_gain [M]: c, the per-output gain the program aims at; error: relative ||A - c W|| of the
    last measurement; dead: the dead input positions (within a tile)."""

    weight: torch.Tensor
    columns: torch.Tensor
    out_gain: torch.Tensor
    error: float
    dead: tuple[int, ...]


def measure(devices: Sequence[DeviceProfile], programs: torch.Tensor, live: torch.Tensor, *,
            tile_size: int | None, input_range: float, load: keys.Key, probe: keys.Key, partial_sums: str,
            predistort: bool = False, mount: Mount | None = None, compile: bool = False, probes: int = FIT_PROBES
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """The effective matrices A [P, M, K'] (zero at unused columns) and offsets [P, M] of `programs` [P, M, K'] on
    tiles, one per profile of `devices` (a population: P design points of one shape): node volts against the
    drive u, least squares over `probes` random drives in [-r, r], each point's through its own load, all in
    one product (`tile_product.LoadStack`; compiled with `compile`: the same numbers to float rounding)."""
    tiles = [TiledMatrix(d, w, tile_size=tile_size, generator=load, input_range=input_range, predistort=predistort,
                         mount=mount) for d, w in zip(devices, programs)]
    gen = torch.Generator().manual_seed(probe.value & ((1 << 63) - 1))
    k, count = int(live.sum()), len(devices)
    drive = (torch.rand(probes, k, generator=gen, dtype=programs.dtype) * 2 - 1) * input_range
    t = programs.new_zeros(probes, programs.shape[2])
    t[:, live] = drive
    out = LoadStack(tiles)(t.repeat(count, 1), [probe] * count, torch.arange(probes).repeat(count),
                           partial_sums=partial_sums, call=0, passes=1, compile=compile)
    node = out.nodes.view(count, probes, -1)
    x = torch.cat([t[:, live] / out.input_scale.view(count, probes)[..., None],
                   t.new_ones(count, probes, 1)], dim=2)
    solution = least_squares(x, node)  # [P, k + 1, M]
    a = programs.new_zeros(programs.shape)
    a[:, :, live] = solution[:, :k].transpose(1, 2)
    return a, solution[:, k]


def _ratios(a: torch.Tensor, w: torch.Tensor, live: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(c [P, M], b [P, K']): per-output and per-column median gains of each point's A [P, M, K'] against its
    W [P, M, K'] (b = 1 where unused).

    Only entries with |W| >= SIGNIFICANT of their row's largest count (a small weight's ratio is
    mostly noise); a row's gain stays within [1/4, 4] of the median over rows, and one without
    usable entries gets that median.
    """
    big = w.abs() >= SIGNIFICANT * w.abs().amax(dim=2, keepdim=True)
    used = live & (w != 0) & big
    ratio = torch.where(used, a / torch.where(used, w, torch.ones_like(w)), torch.full_like(w, float("nan")))
    c = ratio.nanmedian(dim=2).values
    typical = torch.where(torch.isfinite(c), c, torch.full_like(c, float("nan"))).nanmedian(dim=1, keepdim=True).values
    typical = torch.where(torch.isnan(typical), torch.ones_like(typical), typical)
    c = torch.where(torch.isfinite(c), c, typical)
    c = torch.minimum(torch.maximum(c, typical / 4), typical * 4)
    b = (ratio / c[..., None]).nanmedian(dim=1).values
    return c, torch.where(torch.isfinite(b) & live, b, torch.ones_like(b))


def expand_columns(k: int, tile: int, dead: set[int]) -> torch.Tensor:
    """The column of each of k inputs when the positions `dead` (mod tile) are skipped."""
    columns, q = [], 0
    while len(columns) < k:
        if q % tile not in dead:
            columns.append(q)
        q += 1
    return torch.tensor(columns)


def fit_tile_program(device: DeviceProfile, weight: torch.Tensor, *, tile_size: int, input_range: float,
                     key: keys.Key, partial_sums: str = "analog", rounds: int = FIT_ROUNDS,
                     predistort: bool = False, mount: Mount | None = None, compile: bool = False,
                     probes: int = FIT_PROBES) -> TileProgram:
    """The program for `weight` [M, K] (module docstring) after `rounds` closed-loop corrections on `probes`
    probes each (the `fit_rounds` and `fit_probes` options); `key` keys every load and probe; `predistort`:
    the tiles' emitter drive linearised, `mount`: the tiles' modules (`TiledMatrix`); `compile`: the
    probe products compiled (`measure`). A population of one: `fit_tile_programs`."""
    return fit_tile_programs([device], weight, tile_size=tile_size, input_range=input_range, key=key,
                             partial_sums=partial_sums, rounds=rounds, predistort=predistort, mount=mount,
                             compile=compile, probes=probes)[0]


def fit_tile_programs(devices: Sequence[DeviceProfile], weight: torch.Tensor, *, tile_size: int, input_range: float,
                      key: keys.Key, partial_sums: str = "analog", rounds: int = FIT_ROUNDS, predistort: bool = False,
                      mount: Mount | None = None, compile: bool = False, probes: int = FIT_PROBES) -> list[TileProgram]:
    """`fit_tile_program` for a population: the programs of `weight` on each of `devices` (design points of
    one shape on one chip, `tile_product.PER_LOAD`), every measurement of all of them one product. Each
    point's program is the one it gets alone (tests/execute/test_population.py); points whose dead input
    positions differ continue in groups of the same."""
    dtype = weight.dtype
    weight = weight.double()  # least squares on noisy probes: float64 inside, the program in `dtype`
    m, k = weight.shape
    count = len(devices)
    opts = dict(tile_size=tile_size, input_range=input_range, partial_sums=partial_sums, predistort=predistort,
                mount=mount, compile=compile, probes=probes)
    # 1. dead input positions, from W at its natural columns
    natural = torch.ones(k, dtype=torch.bool)
    a, _ = measure(devices, weight.expand(count, m, k), natural, load=key.fold(0, 0), probe=key.fold(1, 0), **opts)
    _, b = _ratios(a, weight.expand(count, m, k), natural)
    positions = torch.arange(k) % tile_size
    dead = [frozenset(int(p) for p in positions.unique() if float(b[i, positions == p].median()) < DEAD_GAIN)
            for i in range(count)]
    out: list[TileProgram | None] = [None] * count
    for group in dict.fromkeys(dead):
        members = [i for i in range(count) if dead[i] == group]
        for i, program in zip(members, _closed_loop([devices[i] for i in members], weight, set(group), rounds,
                                                    key, opts)):
            out[i] = TileProgram(program.weight.to(dtype), program.columns, program.out_gain.to(dtype),
                                 program.error, program.dead)
    return out  # type: ignore[return-value]


def _closed_loop(devices: list[DeviceProfile], weight: torch.Tensor, dead: set[int], rounds: int, key: keys.Key,
                 opts: dict) -> list[TileProgram]:
    """Steps 2 and 3 of the module docstring for points with the same dead positions: separable gains, then
    the damped closed-loop rounds, every point's measurement one product."""
    m, k = weight.shape
    count, tile_size = len(devices), opts["tile_size"]
    columns = expand_columns(k, tile_size, dead)
    wide = weight.new_zeros(m, int(columns[-1]) + 1)
    wide[:, columns] = weight
    live = torch.zeros(wide.shape[1], dtype=torch.bool)
    live[columns] = True
    wides = wide.expand(count, *wide.shape)
    a, _ = measure(devices, wides, live, load=key.fold(0, 1), probe=key.fold(1, 1), **opts)
    c, b = _ratios(a, wides, live)
    target = c[..., None] * wide
    program = wide / b[:, None, :]
    best_error = [float(e) for e in _errors(a, target)]
    best = [wide] * count
    step = torch.full((count, wide.shape[1]), DAMPING, dtype=wide.dtype)
    previous: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None  # (column errors, program, A) kept
    for r in range(rounds):
        a, _ = measure(devices, program, live, load=key.fold(0, 2 + r), probe=key.fold(1, 2 + r), **opts)
        for i, error in enumerate(_errors(a, target)):
            if float(error) < best_error[i]:
                best_error[i], best[i] = float(error), program[i]
        column_error = (a - target).norm(dim=1)
        if previous is not None:  # a column whose error grew steps back and halves its step
            worse = column_error > previous[0]
            step = torch.where(worse, 0.5 * step, step)
            program = torch.where(worse[:, None, :], previous[1], program)
            column_error = torch.where(worse, previous[0], column_error)
            a = torch.where(worse[:, None, :], previous[2], a)
        previous = (column_error, program, a)
        program = torch.where(live, program + step[:, None, :] * (target - a) / (c[..., None] * b[:, None, :]), program)
    return [TileProgram(best[i], columns, c[i], best_error[i], tuple(sorted(dead))) for i in range(count)]


def _errors(a: torch.Tensor, target: torch.Tensor) -> list[torch.Tensor]:
    """Each point's relative matrix error ||A - c W|| / ||c W||."""
    return [(a[i] - target[i]).norm() / target[i].norm() for i in range(a.shape[0])]
