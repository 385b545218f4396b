"""What a chip's calibration programs for a linear map on its tiles (`fit_maps`), once per chip and map.

A twin tile does not compute the matrix it holds (per-entry gains, a dead input, crosstalk), so the
program is fitted (aocsim/execute/tile_program.py: dead input positions skipped, separable gains folded
in, damped closed-loop corrections), W / sigma going into the fit with sigma putting the largest ideal node
of the calibration inputs at `HEADROOM` of the ADC's range, and the program scaled so that the measured
nodes do. A model's maps are fitted in order onto the machine's modules (`Mount`), remembered (`FITS`) on
everything a fit reads, and, for a population's design points, fitted together (`fit_maps_population`).
Each weight load of a program is `aocsim.execute.device_linear.DeviceLinear`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from aocsim.errors import InputError
from aocsim.execute.option_groups import ON_TILES, TileOptions
from aocsim.execute import tile_program
from aocsim.hardware.engine import emitter_calibration, keys
from aocsim.hardware.engine.machine import Mount
from aocsim.hardware.engine.memo import Memo
from aocsim.hardware.engine.tiles import input_scale
from aocsim.hardware.engine.tiles import _input_range as default_input_range
from aocsim.hardware.engine.tiles import _tile_size as resolve_tile_size
from aocsim.hardware.profiles.profile import DeviceProfile

HEADROOM = 0.8  # the largest calibration node signal, as a fraction of the ADC's half range


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
            tile: TileOptions = TileOptions(), input_range: float | None = None,
            mount: Mount | None = None) -> MapProgram:
    """The program of W [M, K] on the chip `device` describes (module docstring: dead positions, gains,
    closed-loop rounds on probe loads keyed by `key`, then the scale), fitted on the calibration
    inputs [R, K] for the tile options `tile`: done once per chip and map, whatever the loads that follow
    (`tile.fit_rounds` rounds on `tile.fit_probes` probes each, its probe products compiled with
    `tile.compile`). A population of one: `fit_map_population`."""
    return fit_map_population([device], weight, inputs, key=key, tile=tile, input_range=input_range, mount=mount)[0]


def fit_map_population(devices: list[DeviceProfile], weight: torch.Tensor, inputs: torch.Tensor, *, key: keys.Key,
                       tile: TileOptions = TileOptions(), input_range: float | None = None,
                       mount: Mount | None = None) -> list[MapProgram]:
    """`fit_map` on each of a population's design points (profiles of one shape on one chip,
    `tile_product.PER_LOAD`), their probe products run together (`tile_program.fit_tile_programs`)."""
    tile = on_tiles(tile)
    check_probes(tile, weight.shape)
    r = default_input_range(devices[0], input_range)  # (the drive's range and the ADC's are the shape's)
    size = resolve_tile_size(devices[0], tile.tile_size)
    low, high = (float(v) for v in devices[0].parts.readout.range_v)
    half = min(-low, high)
    # sigma: the calibration inputs' largest ideal node at HEADROOM of the ADC's half range
    sigma = float(ideal_nodes(weight, inputs, r, 1.0).abs().max()) / (HEADROOM * half) or 1.0
    programs = tile_program.fit_tile_programs(devices, weight / sigma, tile_size=size, input_range=r, key=key,
                                              partial_sums=tile.partial_sums, rounds=tile.fit_rounds,
                                              predistort=tile.predistort, mount=mount, compile=tile.compile,
                                              probes=tile.fit_probes)
    # The nodes come out about c (W / sigma) u: scale the program so that they use the ADC's range.
    target = ideal_nodes(weight, inputs, r, sigma)
    out = []
    for program in programs:
        kappa = HEADROOM * half / float((target * program.out_gain).abs().max())
        out.append(MapProgram(kappa * program.weight, program.columns, sigma, program.error, program.dead, size, r,
                              mount or Mount()))
    return out


def check_probes(tile: TileOptions, shape: Sequence[int]) -> None:
    """A one-line InputError unless the fit's probes (`tile.fit_probes`, resolved) can measure a map W of
    `shape` [M, K]. `registry.resolve` asks it of every map a kind fits (`PlacedModel.fitted_maps`) before any
    work; the fits ask it again for callers that fit maps directly."""
    if tile.fit_probes <= shape[1]:
        raise InputError(f"fit_probes = {tile.fit_probes}; expected more than the inputs of the map W "
                         f"{list(shape)} ({shape[1]}): least squares over the probes measures its "
                         "matrix and offset")


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
    that point gets alone. The maps' fit keys are the chip's (`fit_key`), so the points must share it."""
    chips = sorted({d.parts.variation.chip_seed for d in devices})
    if len(chips) > 1:
        raise InputError(f"devices have variation.chip_seed = {chips}; expected the design points of one chip (a "
                         "fit's probes are keyed by its chip: fit each chip's population on its own)")
    tile = on_tiles(tile).fitted()
    for weight, _, _ in maps:  # every map before any fit
        check_probes(tile, weight.shape)
    constants = (tuple(getattr(tile_program, c) for c in ("DEAD_GAIN", "DAMPING", "SIGNIFICANT")),
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
