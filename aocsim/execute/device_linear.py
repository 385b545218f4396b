"""A linear map on optical tiles, calibrated (`DeviceLinear`).

Placement, per chip and weight load (what a real machine does after programming):

- **the program** (aocsim/execute/map_fit.py, aocsim/execute/tile_program.py): a twin tile does not compute the matrix it
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

import torch
from torch import nn

from aocsim.errors import InputError
from aocsim.execute.fit import affine_fit
from aocsim.execute.map_fit import MapProgram, fit_key, fit_map, ideal_nodes, on_tiles
from aocsim.execute.option_groups import TileOptions
from aocsim.execute.token_keys import TokenKeys
from aocsim.hardware.engine import keys
from aocsim.hardware.engine.machine import Mount
from aocsim.hardware.engine.tiles import TiledMatrix
from aocsim.hardware.physics.energy import Activity
from aocsim.hardware.profiles.profile import DeviceProfile


# An output's calibrated gain stays within this factor of the median (else the median): a weak row of W
# (a5-implicit's in_proj has one at a tenth of the median norm) is mostly noise at the node, and a gain
# fitted to noise (0.003 on one aoc48 load) would multiply it by hundreds.
GAIN_SPREAD = 4.0

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
            (`TiledMatrix`); modules: read by `fit_maps`, not here; fit_probes and fit_rounds: the fit's
            probes and closed-loop corrections (aocsim/execute/tile_program.py), when program is None;
            compile: below.
        input_range: as in `TiledMatrix` (for the fit when program is None).
        mount: where its tiles sit on the machine's modules, for the fit when program is None (a program
            carries its own: `fit_maps`; None = one module per tile).

    `tile.compile` runs the tile products of its per-token calls compiled (`TiledMatrix`, compile=True: the
            same numbers to float rounding; needs a C++ compiler, compiles once per process and shape):
            calls of one position per row (a token's iterations, a DEQ's) and calls outside a placed run;
            a pass over many positions at once (the injection's) and the calibration passes run eagerly.
    The rule reads only the call itself, never what ran before, so a seed gives the same bits
    however often and in whatever order the model runs.
    """

    def __init__(self, device: DeviceProfile, weight: torch.Tensor, bias: torch.Tensor | None,
                 inputs: torch.Tensor, *, generator: keys.Seed, program: MapProgram | None = None,
                 tile: TileOptions = TileOptions(), input_range: float | None = None,
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
                              mount=mount)
        mount = program.mount
        self.program, self.sigma, self.input_range = program, program.sigma, program.input_range
        self.columns, self.width, self.program_error = program.columns, program.weight.shape[1], program.error
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
        if rows is not None and rows.positions is not None:  # a placed model's run: keyed per token
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
