"""A linear map on optical tiles, calibrated (`DeviceLinear`).

Placement, per chip and weight load (what a real machine does after programming):

- **the program** (aocsim/execute/tile_program.py): a twin tile does not compute the matrix it
  holds (per-entry gains, a dead input, crosstalk), so what is programmed is fitted: dead input
  positions skipped, separable gains folded in, damped closed-loop corrections.
- **scale**: W / sigma goes into the fit, sigma putting the largest ideal node of the calibration
  inputs at `HEADROOM` of the ADC's range; the final load is scaled so that the measured nodes do.
- **calibration**: after a fresh final load, per output j the node volts (the ADC reading over the
  per-row input scale s) are fitted as g_j (W u / sigma)_j + o_j by least squares on the inputs the
  map sees on the exact path: the remaining gain and the node offsets (LED constants, dark
  currents). A call returns y = sigma s (node - o) / g (+ bias, digital). What this cannot absorb
  (the emitters' cubic response, SLM and ADC quantisation, the programming error of the final load,
  noise) is the device's error.
- **averaging**: a product may be the mean of K tile passes, each with its own keyed draws.

Noise: keyed by token when a placed model announces its passes (`TokenKeys`, in
aocsim/execute/token_keys.py: the pass of token (s, t) at visit v draws from key.fold(TILE_CALL, v, i) for tile i at counter s L + t); a
`DeviceLinear` used on its own counts its calls instead, its rows being the counters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from aocsim.errors import InputError
from aocsim.execute.fit import affine_fit
from aocsim.execute.option_groups import ON_TILES, TileOptions
from aocsim.execute import tile_program
from aocsim.execute.token_keys import TokenKeys
from aocsim.execute.tile_program import ROUNDS
from aocsim.hardware.engine import emitter_calibration, keys
from aocsim.hardware.engine.machine import Mount
from aocsim.hardware.engine.memo import Memo
from aocsim.hardware.engine.tiles import TiledMatrix, input_scale
from aocsim.hardware.engine.tiles import _input_range as default_input_range
from aocsim.hardware.engine.tiles import _tile_size as resolve_tile_size
from aocsim.hardware.physics.energy import Activity
from aocsim.hardware.profiles.profile import DeviceProfile

HEADROOM = 0.8  # the largest calibration node signal, as a fraction of the ADC's half range
# An output's calibrated gain stays within this factor of the median (else the median): a weak row of W
# (a5-implicit's in_proj has one at a tenth of the median norm) is mostly noise at the node, and a gain
# fitted to noise (0.003 on one aoc48 load) would multiply it by hundreds.
GAIN_SPREAD = 4.0


@dataclass(frozen=True)
class MapProgram:
    """What a chip's calibration found for one map (`fit_map`), the same for every load of it.

    weight: [M, K'] what each load programs (the fitted program, scaled so that the calibration
    nodes use `HEADROOM` of the ADC's range); columns [K]: the column of input k (dead positions
    skipped); sigma: the scale of W in the fit; error: the program's matrix error (last closed-loop
    round); dead: the dead input positions; tile_size, input_range: the tiles it was fitted for;
    mount: the modules its tiles sit on (`fit_maps`).
    """

    weight: torch.Tensor
    columns: torch.Tensor
    sigma: float
    error: float
    dead: tuple[int, ...]
    tile_size: int
    input_range: float
    mount: Mount = Mount()

    @property
    def tiles(self) -> int:
        return math.ceil(self.weight.shape[0] / self.tile_size) * math.ceil(self.weight.shape[1] / self.tile_size)


def ideal_nodes(weight: torch.Tensor, t: torch.Tensor, input_range: float, sigma: float) -> torch.Tensor:
    """(W / sigma) u per row, in node volts, for the drive u = t / s the tiles apply."""
    return (t / input_scale(t, input_range)[:, None]) @ (weight / sigma).T


def fit_key(device: DeviceProfile, map_index: int = 0) -> keys.Key:
    """The key of a map's fit on the chip `device` describes: under the chip's root (`Stream.FIT`)."""
    return keys.chip_root(device.parts.variation.chip_seed).fold(keys.Stream.FIT, map_index)


def fit_map(device: DeviceProfile, weight: torch.Tensor, inputs: torch.Tensor, *, key: keys.Key,
            tile: TileOptions = TileOptions(), input_range: float | None = None, rounds: int = ROUNDS,
            mount: Mount | None = None) -> MapProgram:
    """The program of W [M, K] on the chip `device` describes (module docstring: dead positions, gains,
    closed-loop rounds on probe loads keyed by `key`, then the scale), fitted on the calibration
    inputs [R, K] for the tile options `tile`: done once per chip and map, whatever the loads that follow
    (its probe products compiled with `tile.compile`). A population of one: `fit_map_population`."""
    return fit_map_population([device], weight, inputs, key=key, tile=tile, input_range=input_range, rounds=rounds,
                              mount=mount)[0]


def fit_map_population(devices: list[DeviceProfile], weight: torch.Tensor, inputs: torch.Tensor, *, key: keys.Key,
                       tile: TileOptions = TileOptions(), input_range: float | None = None, rounds: int = ROUNDS,
                       mount: Mount | None = None) -> list[MapProgram]:
    """`fit_map` on each of a population's design points (profiles of one shape on one chip,
    `tile_product.PER_LOAD`), their probe products run together (`tile_program.fit_tile_programs`)."""
    tile = on_tiles(tile)
    r = default_input_range(devices[0], input_range)  # (the drive's range and the ADC's are the shape's)
    size = resolve_tile_size(devices[0], tile.tile_size)
    low, high = (float(v) for v in devices[0].parts.readout.range_v)
    half = min(-low, high)
    # sigma: the calibration inputs' largest ideal node at HEADROOM of the ADC's half range
    sigma = float(ideal_nodes(weight, inputs, r, 1.0).abs().max()) / (HEADROOM * half) or 1.0
    programs = tile_program.fit_tile_programs(devices, weight / sigma, tile_size=size, input_range=r, key=key,
                                              partial_sums=tile.partial_sums, rounds=rounds,
                                              predistort=tile.predistort, mount=mount, compile=tile.compile)
    # The nodes come out about c (W / sigma) u: scale the program so that they use the ADC's range.
    target = ideal_nodes(weight, inputs, r, sigma)
    out = []
    for program in programs:
        kappa = HEADROOM * half / float((target * program.out_gain).abs().max())
        out.append(MapProgram(kappa * program.weight, program.columns, sigma, program.error, program.dead, size, r,
                              mount or Mount()))
    return out


def on_tiles(tile: TileOptions) -> TileOptions:
    """`tile` with every option left at None set to the default of the kinds on tiles."""
    return tile.resolved(ON_TILES[0])


def fit_maps(device: DeviceProfile, maps: list[tuple[torch.Tensor, torch.Tensor, keys.Key]],
             tile: TileOptions = TileOptions()) -> list[MapProgram]:
    """The programs of a model's maps [(W, calibration inputs, fit key)] on one machine (`fit_map`
    with the tile options `tile`): weight-stationary (tile.modules None, or at least the programs' tiles) puts each map's
    tiles on modules of their own, after the previous map's; fewer modules time-multiplexes every
    tile onto them (`Mount`). Fitted in order, so that each map knows where the last one ended (a
    program can be a tile wider than its matrix: dead input positions are skipped).

    Memoised (`FITS`: aocsim/hardware/engine/memo.py, in memory and in the calibration store or a sweep's
    folder, keyed on the machine too) on everything a fit reads: every value of the profile (the chip),
    each map's W, inputs and key, the tile options a fit reads (`TileOptions.fitted`) and the fit's
    constants (and the emitter measurement's, for predistortion). So sweep points that differ only in
    what a fit does not read (averaging, the stop rule, the SNR noise, the mode) place the model once
    per chip; a fit is deterministic, so a hit is what a fit would give. A population of one:
    `fit_maps_population`.
    """
    return fit_maps_population([device], maps, tile)[0]


def fit_maps_population(devices: list[DeviceProfile], maps: list[tuple[torch.Tensor, torch.Tensor, keys.Key]],
                        tile: TileOptions = TileOptions()) -> list[list[MapProgram]]:
    """`fit_maps` for each of a population's design points on one chip: each point's programs remembered or
    stored as `fit_maps` keeps them, the others fitted together (`fit_map_population`), each the program
    that point gets alone."""
    tile = on_tiles(tile).fitted()
    constants = (tuple(getattr(tile_program, c) for c in ("DEAD_GAIN", "PROBES", "ROUNDS", "DAMPING", "SIGNIFICANT")),
                 tuple(getattr(emitter_calibration, c) for c in ("LEVELS", "REPEATS", "DEAD")), HEADROOM)
    inputs = [(device, [(w, x, k) for w, x, k in maps], tile, *constants) for device in devices]
    return [list(p) for p in FITS.many(inputs, lambda missing: _fit_maps([devices[i] for i in missing], maps, tile))]


def _record(program: MapProgram) -> dict[str, Any]:
    m = program.mount
    return {"weight": program.weight, "columns": program.columns, "sigma": program.sigma, "error": program.error,
            "dead": tuple(program.dead), "tile_size": program.tile_size, "input_range": program.input_range,
            "mount": (m.first, m.count, int(m.multiplexed))}


def _program(record: dict[str, Any]) -> MapProgram:
    first, count, multiplexed = record["mount"]
    return MapProgram(record["weight"], record["columns"], float(record["sigma"]), float(record["error"]),
                      tuple(int(d) for d in record["dead"]), int(record["tile_size"]), float(record["input_range"]),
                      Mount(int(first), int(count), bool(multiplexed)))


# A model's programs on one chip, kept per process and in the calibration store (`fit_maps`): a few models x
# chips of a sweep in memory.
FITS: Memo[list[MapProgram]] = Memo("fits", 16, stored=True, to_records=lambda ps: [_record(p) for p in ps],
                                    from_records=lambda records: [_program(r) for r in records])


def _fit_maps(devices: list[DeviceProfile], maps: list[tuple[torch.Tensor, torch.Tensor, keys.Key]],
              tile: TileOptions) -> list[list[MapProgram]]:
    modules = tile.modules

    def fit_all(members: list[int], multiplexed: bool) -> dict[int, list[MapProgram]]:
        programs: dict[int, list[MapProgram]] = {i: [] for i in members}
        for weight, inputs, key in maps:
            mounts = {i: Mount(sum(p.tiles for p in programs[i]), modules or 1, multiplexed) for i in members}
            for mount in dict.fromkeys(mounts.values()):  # points whose earlier maps ended alike, together
                group = [i for i in members if mounts[i] == mount]
                fitted = fit_map_population([devices[i] for i in group], weight, inputs, key=key, tile=tile,
                                            mount=mount)
                for i, program in zip(group, fitted):
                    programs[i].append(program)
        return programs

    size = resolve_tile_size(devices[0], tile.tile_size)
    natural = sum(math.ceil(w.shape[0] / size) * math.ceil(w.shape[1] / size) for w, _, _ in maps)
    guess = modules is not None and modules < natural
    programs = fit_all(list(range(len(devices))), guess)
    wrong = [i for i, ps in programs.items() if (modules is not None and modules < sum(p.tiles for p in ps)) != guess]
    if wrong:  # the programs' dead columns added the tile that decides it
        programs.update(fit_all(wrong, not guess))
    return [programs[i] for i in range(len(devices))]


class DeviceLinear(nn.Module):
    """A linear map on optical tiles, loaded and calibrated: call it like the `nn.Linear` it replaces.

    Args:
        device: the profile (one chip: its `variation.chip_seed`).
        weight: W [M, K]; bias: [M] or None (added digitally).
        inputs: calibration inputs [R, K] (what the map sees on the exact path).
        generator: key of this weight load (its programming draws), of the probe passes that
            calibrate it and, until a placed model resets it, of its calls' noise.
        program: the chip's fitted program (`fit_map`); None: fitted here, keyed by the chip (`fit_key`).
        tile: the tile options (aocsim/execute/option_groups.py `TileOptions`; None values take the
            defaults of the kinds on tiles): tile_size and partial_sums as in `TiledMatrix` (for the fit
            when program is None); averaging: tile passes per call, their node readings averaged (the
            per-pass noise's std falls as 1 / sqrt(averaging); time and conversions grow by the factor:
            `activity`); predistort: the emitter drive linearised digitally before the DAC
            (`TiledMatrix`); modules: read by `fit_maps`, not here; compile: below.
        input_range: as in `TiledMatrix` (for the fit when program is None).
        rounds: closed-loop corrections of the program (aocsim/execute/tile_program.py).
        mount: where its tiles sit on the machine's modules, for the fit when program is None (a program
            carries its own: `fit_maps`; None = one module per tile).

    `tile.compile` runs the tile products of its per-token calls compiled (`TiledMatrix`, compile=True: the
            same numbers to float rounding; needs a C++ compiler, compiles once per process and shape):
            calls of one position per row (a token's iterations, a DEQ's) and calls outside a placed run;
            in a run whose token passes all have the batch's rows (`TokenKeys.one_shape`), a pass over
            many positions at once (the injection's) position by position, through the graph of a
            token's pass (`_by_position`); elsewhere such a pass, and the calibration passes, eagerly.
    The rule reads only the call itself, never what ran before, so a seed gives the same bits
    however often and in whatever order the model runs.
    """

    def __init__(self, device: DeviceProfile, weight: torch.Tensor, bias: torch.Tensor | None,
                 inputs: torch.Tensor, *, generator: keys.Seed, program: MapProgram | None = None,
                 tile: TileOptions = TileOptions(), input_range: float | None = None, rounds: int = ROUNDS,
                 mount: Mount | None = None) -> None:
        super().__init__()
        tile = on_tiles(tile)
        self.compile, self.averaging, self.predistort = tile.compile, tile.averaging, tile.predistort
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        self.weight, self.bias, self.partial_sums = weight, bias, tile.partial_sums
        key = keys.as_key(generator)
        if key is None:
            raise InputError("generator = None; placing a map on tiles draws its weight loads, so expected a "
                             "seed, torch.Generator or Key")
        if program is None:
            program = fit_map(device, weight, inputs, key=fit_key(device), tile=tile, input_range=input_range,
                              rounds=rounds, mount=mount)
        mount = program.mount
        self.program, self.sigma, self.input_range = program, program.sigma, program.input_range
        self.columns, self.width, self.program_error = program.columns, program.weight.shape[1], program.error
        self.dead_positions = program.dead
        self.tiles = TiledMatrix(device, program.weight, tile_size=program.tile_size, generator=key,
                                 input_range=self.input_range, predistort=self.predistort, mount=mount)  # the load
        target = ideal_nodes(weight, inputs, self.input_range, self.sigma)
        node, _ = self._nodes(inputs, key.fold(keys.Stream.CALIBRATION))
        self.gain, self.offset = affine_fit(target, node, spread=GAIN_SPREAD)
        self.calibration_error = float((corrected(node, self.gain, self.offset) - target).norm()
                                       / target.norm().clamp_min(1e-300))
        self.run_key, self.calls = key.fold(keys.Stream.RUN), 0
        self.token_keys: TokenKeys | None = None  # set by PlacedSSM for a run

    def wide(self, t: torch.Tensor) -> torch.Tensor:
        """Inputs t [R, K] on the program's live columns [R, K']."""
        wide = t.new_zeros(t.shape[0], self.width)
        wide[:, self.columns] = t
        return wide

    def _nodes(self, t: torch.Tensor, key: keys.Key, call: int | torch.Tensor = 0, samples: torch.Tensor | None = None,
               passes: int = 1, compile: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Node volts [R, M] of inputs t [R, K] (the mean of `passes` passes) and the input scales [R]; a row
        whose inputs are not finite (a state that diverged digitally) reads NaN, its row alone (the tiles take
        it as zero drive), so that its token's solve reports divergence instead of the run stopping."""
        bad = ~torch.isfinite(t).all(dim=1)
        diverged = bool(bad.any())
        if diverged:
            t = torch.where(bad[:, None], torch.zeros((), dtype=t.dtype), t)
        out = self.tiles(self.wide(t), partial_sums=self.partial_sums, generator=key, call=call, samples=samples,
                         passes=passes, compile=compile)
        if diverged:
            return out.nodes.masked_fill(bad[:, None], float("nan")), out.input_scale
        return out.nodes, out.input_scale

    def _by_position(self, x: torch.Tensor, samples: torch.Tensor, visit: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Node volts [R T, M] and input scales [R T] of a compiled pass over positions, x [R, T, K]: position
        by position, each a product of R rows with a call per row, the shape and structure of a token
        pass (aocsim/nn/ssm_rows.py), so that the pass runs through that pass's compiled graph."""
        b, length = x.shape[:2]
        ids, calls = samples.view(b, length), torch.full((b,), visit, dtype=torch.int64, device=samples.device)
        each = [self._nodes(x[:, t], self.run_key, calls, ids[:, t], self.averaging, True) for t in range(length)]
        return (torch.stack([node for node, _ in each], 1).reshape(b * length, -1),
                torch.stack([scale for _, scale in each], 1).reshape(-1))

    def output(self, node: torch.Tensor, scale: torch.Tensor, gain: torch.Tensor, offset: torch.Tensor,
               sigma: torch.Tensor | None = None) -> torch.Tensor:
        """y [R, M] from node volts [R, M] and input scales [R], calibrated by `gain` and `offset` ([M],
        or per row [R, M] for a stack of loads) and scaled by the program's sigma (or per row [R], a
        population's), the bias added digitally."""
        sigma_ = self.sigma if sigma is None else sigma[:, None]
        y = corrected(node, gain, offset) * (sigma_ * scale[:, None])
        return y if self.bias is None else y + self.bias

    def activity(self, *, loads: bool = True) -> Activity:
        """What one call does per input row: every tile `averaging` times (`TiledMatrix.activity`); loads=False:
        without its weight loads, which the rows of a call share (`load_activity`)."""
        return self.tiles.activity(self.partial_sums, self.averaging, loads=loads)

    def load_activity(self) -> Activity:
        """The weight loads of one call, shared by its rows (`TiledMatrix.load_activity`)."""
        return self.tiles.load_activity()

    def reset(self, generator: keys.Seed) -> None:
        """Restart the call count under a new noise key (a run's seed)."""
        self.run_key, self.calls = keys.as_key(generator), 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = self.token_keys
        if rows is not None and rows.one_shape and self.compile and x.ndim == 3 and not rows.per_row:
            node, scale = self._by_position(x, rows.samples(tuple(x.shape[:-1])), rows.visit)
        elif rows is not None and rows.positions is not None:  # a placed model's run: keyed per token
            node, scale = self._nodes(x.reshape(-1, self.in_features), self.run_key, rows.calls(),
                                      rows.samples(tuple(x.shape[:-1])), self.averaging,
                                      self.compile and (rows.per_row or rows.positions.numel() == 1))
        else:
            node, scale = self._nodes(x.reshape(-1, self.in_features), self.run_key, self.calls, None, self.averaging,
                                      self.compile)
        self.calls += 1
        return self.output(node, scale, self.gain, self.offset).reshape(*x.shape[:-1], self.out_features)


def corrected(node: torch.Tensor, gain: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """The calibration undone: (node - offset) / gain (module docstring)."""
    return (node - offset) / gain
