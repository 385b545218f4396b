"""An implicit SSM on a virtual AOC as a hybrid: its linear maps on optical tiles, the rest digital.

The model (aocsim/nn/implicit_ssm.py) iterates z = f(z) per token; inside f, every linear map
(the injection W_u, and each block's input and output projections) is a matrix product. Placed on a
device (`place_ssm`), each of them becomes a `DeviceLinear`: the matrix programmed onto a grid of
optical tiles (aocsim/hardware/engine/tiles.py), each call a tile pass with its own noise. Everything else
stays digital in float64: RMSNorm, SiLU, softplus, exp, the causal conv and the selective scan,
the scan state between tokens, and the head; with `elementwise="analog"` the SiLU and softplus
run on modelled analog circuits instead (aocsim/execute/elementwise.py). The model's own code runs unchanged (its modules are
swapped), so both execution modes (simultaneous, sequential) run on the device.

Placement, per chip and weight load (what a real machine does after programming):

- **which maps**: `on_tiles` (default all of `MAP_KINDS`); the others stay digital.
- **plain weights**: weight normalisation is resolved into the plain matrix it parametrises.
- **the program** (aocsim/execute/tile_program.py): a twin tile does not compute the matrix it
  holds (per-entry gains, a dead input, crosstalk), so what is programmed is fitted: dead input
  positions skipped, separable gains folded in, damped closed-loop corrections.
- **scale**: W / sigma goes into the fit, sigma putting the largest ideal node of the calibration
  inputs at `HEADROOM` of the ADC's range; the final load is scaled so that the measured nodes do.
- **calibration**: after a fresh final load, per output j the node volts (the ADC reading over the
  per-row input scale s) are fitted as g_j (W u / sigma)_j + o_j by least squares on the inputs each
  map sees on the exact path for sequences of the task (`calibration_inputs`): the remaining gain
  and the node offsets (LED constants, dark currents). A call returns y = sigma s (node - o) / g
  (+ bias, digital). What this cannot absorb (the emitters' cubic response, SLM and ADC
  quantisation, the programming error of the final load, noise) is the device's error.

Noise: keyed by token. The model announces each pass of tokens through its maps (`pass_hook`: the
positions and how often they have been through, their visit); a `PlacedSSM` run tells its maps the
sequences' ids, so the pass of token (s, t) at visit v through map m draws from
key.fold(m).fold(TILE_CALL, v, i) for tile i at counter s L + t (`TiledMatrix` samples). A run is
reproducible from its seed (`PlacedSSM.reset`), and in sequential mode a sequence's run does not
depend on the batch it is in (given its id; simultaneous mode freezes converged prefixes per
batch). A `DeviceLinear` used on its own counts its calls instead, its rows being the counters.
Results on the bundled models: docs/DEVICE_RUNS.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn

from aocsim.errors import InputError
from aocsim.execute.elementwise import AnalogElementwise, recorders, restore, scales_of, site_channels
from aocsim.execute.fit import affine_fit
from aocsim.execute.tile_program import ROUNDS, fit_tile_program
from aocsim.hardware.engine import keys
from aocsim.hardware.profiles.profile import DeviceProfile
from aocsim.hardware.engine.tiles import TiledMatrix, check_predistort, input_scale, tile_options
from aocsim.hardware.engine.tiles import _input_range as default_input_range
from aocsim.hardware.engine.tiles import _tile_size as resolve_tile_size
from aocsim.nn.implicit_ssm import ImplicitSSM

HEADROOM = 0.8  # the largest calibration node signal, as a fraction of the ADC's half range
CALIBRATION_ROWS = 2048  # inputs per map for the fit (subsampled from the exact path's)
MAP_KINDS = ("inject", "in_proj", "out_proj")  # the linear maps inside f that can go onto tiles
ELEMENTWISE = ("digital", "analog")  # how SiLU and softplus run (aocsim/execute/elementwise.py)


def placement(on_tiles: tuple[str, ...], elementwise: str = "digital", averaging: int = 1,
              predistort: bool = False) -> str:
    """The placement in words (a Dataset attribute)."""
    tiles = ", ".join(on_tiles) if on_tiles else "nothing"
    if tile_options(averaging, predistort):
        tiles += f" ({tile_options(averaging, predistort)})"
    if elementwise == "analog":
        return f"hybrid: {tiles} on optical tiles; SiLU and softplus analog; other linear maps, norms, conv, scan, head digital"
    return f"hybrid: {tiles} on optical tiles; other linear maps, norms, conv, scan, head digital"


def check_on_tiles(on_tiles: object) -> tuple[str, ...]:
    """A non-empty subset of MAP_KINDS, in their order; anything else is a one-line error."""
    names = (on_tiles,) if isinstance(on_tiles, str) else on_tiles
    try:
        chosen = tuple(names)
    except TypeError:
        chosen = ("?",)
    unknown = [n for n in chosen if n not in MAP_KINDS]
    if unknown or not chosen:
        raise InputError(f"on_tiles = {on_tiles!r}: unknown placement{' ' + repr(unknown[0]) if unknown else ''}; "
                         f"expected a non-empty subset of {list(MAP_KINDS)}")
    return tuple(k for k in MAP_KINDS if k in chosen)


def check_averaging(averaging: object) -> int:
    """Tile passes averaged per product: an integer >= 1."""
    if isinstance(averaging, bool) or not isinstance(averaging, int) or averaging < 1:
        raise InputError(f"averaging = {averaging!r}; expected an integer >= 1 (tile passes averaged per product)")
    return averaging


def check_elementwise(elementwise: object) -> str:
    if elementwise not in ELEMENTWISE:
        raise InputError(f"elementwise = {elementwise!r}: unknown placement; expected one of {list(ELEMENTWISE)}")
    return str(elementwise)


def plain_copy(model: ImplicitSSM) -> ImplicitSSM:
    """A copy of `model` with weight normalisation resolved into the plain matrices it parametrises."""
    plain = ImplicitSSM(replace(model.config, weight_norm=False)).to(model.head.weight.dtype)
    state = {name: value for name, value in model.state_dict().items() if ".parametrizations." not in name}
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            state[f"{name}.weight"] = module.weight.detach()
    plain.load_state_dict(state)
    return plain.eval()


@dataclass
class TokenKeys:
    """What keys a device run's noise per token: the sequences' ids [B] and length, and the pass in
    progress (positions [T] and visit, from the model's `pass_hook`)."""

    sequences: torch.Tensor
    length: int
    positions: torch.Tensor | None = None
    visit: int = 0

    def announce(self, positions: torch.Tensor, visit: int) -> None:
        self.positions, self.visit = positions, visit

    def samples(self, leading: tuple[int, ...]) -> torch.Tensor:
        """Counters s L + t of the rows of an input with leading dims [B] (one token each) or [B, T]."""
        b, t = len(self.sequences), self.positions.numel()
        if tuple(leading) not in ((b, t), (b,) * (t == 1)):
            raise InputError(f"a pass of {tuple(leading)} rows does not match the announced {t} position(s) "
                             f"of {b} sequences")
        return (self.sequences[:, None] * self.length + self.positions[None, :]).reshape(-1)


class DeviceLinear(nn.Module):
    """A linear map on optical tiles, calibrated: call it like the `nn.Linear` it replaces.

    Args:
        device: the profile (one chip: its `variation.chip_seed`).
        weight: W [M, K]; bias: [M] or None (added digitally).
        inputs: calibration inputs [R, K] (what the map sees on the exact path).
        generator: key of the weight loads (programming draws) and of the calibration probes.
        tile_size, partial_sums, input_range: as in `TiledMatrix`.
        rounds: closed-loop corrections of the program (aocsim/execute/tile_program.py).
        averaging: tile passes per call, their node readings averaged (the per-pass noise's std falls
            as 1 / sqrt(averaging); time and conversions grow by the factor: `passes_per_call`).
        predistort: the emitter drive linearised digitally before the DAC (`TiledMatrix`).
    """

    def __init__(self, device: DeviceProfile, weight: torch.Tensor, bias: torch.Tensor | None,
                 inputs: torch.Tensor, *, generator: keys.Seed, tile_size: int | None = None,
                 partial_sums: str = "analog", input_range: float | None = None, rounds: int = ROUNDS,
                 averaging: int = 1, predistort: bool = False) -> None:
        super().__init__()
        self.averaging = check_averaging(averaging)
        self.predistort = check_predistort(predistort)
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        self.weight, self.bias, self.partial_sums = weight, bias, partial_sums
        key = keys.as_key(generator)
        if key is None:
            raise InputError("generator = None; placing a map on tiles draws its weight loads, so expected a "
                             "seed, torch.Generator or Key")
        self.input_range = default_input_range(device, input_range)
        size = resolve_tile_size(device, tile_size)
        low, high = (float(v) for v in device.values["readout.range_v"])
        half = min(-low, high)
        # sigma: the calibration inputs' largest ideal node at HEADROOM of the ADC's half range
        self.sigma = float(self._ideal_nodes(inputs, 1.0).abs().max()) / (HEADROOM * half) or 1.0
        program = fit_tile_program(device, weight / self.sigma, tile_size=size, input_range=self.input_range,
                                   key=key.fold(0), partial_sums=partial_sums, rounds=rounds, predistort=predistort)
        self.columns, self.width, self.program_error = program.columns, program.weight.shape[1], program.error
        self.dead_positions = program.dead
        # The nodes come out about c (W / sigma) u: scale the program so that they use the ADC's range.
        target = self._ideal_nodes(inputs, self.sigma)
        kappa = HEADROOM * half / float((target * program.out_gain).abs().max())
        self.tiles = TiledMatrix(device, kappa * program.weight, tile_size=size, generator=key.fold(1),
                                 input_range=self.input_range, predistort=predistort)  # the final load: its own draws
        node, _ = self._nodes(inputs, key.fold(2))
        self.gain, self.offset = affine_fit(target, node)
        self.calibration_error = float((self._correct(node) - target).norm() / target.norm().clamp_min(1e-300))
        self.run_key, self.calls = key.fold(3), 0
        self.token_keys: TokenKeys | None = None  # set by PlacedSSM for a run

    def _ideal_nodes(self, t: torch.Tensor, sigma: float) -> torch.Tensor:
        """(W / sigma) u per row, in node volts, for the drive u = t / s the tiles apply."""
        return (t / input_scale(t, self.input_range)[:, None]) @ (self.weight / sigma).T

    def _nodes(self, t: torch.Tensor, key: keys.Key, call: int = 0, samples: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Node volts [R, M] of inputs t [R, K] (placed on their live columns) and the input scales [R]."""
        wide = t.new_zeros(t.shape[0], self.width)
        wide[:, self.columns] = t
        out = self.tiles(wide, partial_sums=self.partial_sums, generator=key, call=call, samples=samples)
        return out.y / out.input_scale[:, None], out.input_scale

    def _correct(self, node: torch.Tensor) -> torch.Tensor:
        return (node - self.offset) / self.gain

    @property
    def passes_per_call(self) -> int:
        """Tile passes (one round trip each) of one call: every tile, `averaging` times."""
        return self.tiles.grid[0] * self.tiles.grid[1] * self.averaging

    def conversions(self) -> tuple[int, int]:
        """(DAC, ADC) conversions per input row of one call (`TiledMatrix.conversions`, `averaging` times)."""
        dac, adc = self.tiles.conversions(self.partial_sums)
        return dac * self.averaging, adc * self.averaging

    def _averaged_nodes(self, t: torch.Tensor, call: int, samples: torch.Tensor | None
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        """The node volts of `averaging` passes, averaged: pass 0 draws from the run's key (so one pass
        is what it was without averaging), pass p >= 1 from its fold (REPEAT, p)."""
        node, scale = self._nodes(t, self.run_key, call, samples)
        for p in range(1, self.averaging):
            node = node + self._nodes(t, self.run_key.fold(keys.Stream.REPEAT, p), call, samples)[0]
        return node / self.averaging, scale

    def reset(self, generator: keys.Seed) -> None:
        """Restart the call count under a new noise key (a run's seed)."""
        self.run_key, self.calls = keys.as_key(generator), 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = self.token_keys
        if rows is not None and rows.positions is not None:  # a placed model's run: keyed per token
            node, scale = self._averaged_nodes(x.reshape(-1, self.in_features), rows.visit,
                                               rows.samples(tuple(x.shape[:-1])))
        else:
            node, scale = self._averaged_nodes(x.reshape(-1, self.in_features), self.calls, None)
        self.calls += 1
        y = self._correct(node) * (self.sigma * scale[:, None])
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], self.out_features)


@dataclass(frozen=True)
class MapReport:
    """One placed map: name, shape, tile grid, scale sigma, the program's matrix error (last
    closed-loop round), the calibration error on its calibration inputs and the dead input positions."""

    name: str
    shape: tuple[int, int]
    grid: tuple[int, int]
    sigma: float
    program_error: float
    calibration_error: float
    dead_positions: tuple[int, ...]


class PlacedSSM:
    """An `ImplicitSSM` whose linear maps run on a device (module docstring). Call it like the model."""

    def __init__(self, model: ImplicitSSM, maps: dict[str, DeviceLinear],
                 functions: dict[str, AnalogElementwise] | None = None) -> None:
        self.model = model
        self.maps = maps
        self.functions = functions or {}  # analog elementwise functions by block ("blocks.i.elementwise")
        names = [*linear_maps(model), *(f"blocks.{i}.elementwise" for i in range(len(model.blocks)))]
        self.index = {name: i for i, name in enumerate(names)}  # stable noise streams

    def reset(self, generator: keys.Seed) -> None:
        """Give every map a fresh call count under key.fold(m): a run reproducible from its seed."""
        key = keys.as_key(generator)
        if key is None:
            raise InputError("generator = None; a device run draws noise on every tile pass, so expected a "
                             "seed, torch.Generator or Key")
        for name, layer in [*self.maps.items(), *self.functions.items()]:
            layer.reset(key.fold(self.index[name]))

    def report(self) -> list[MapReport]:
        return [MapReport(name, (layer.out_features, layer.in_features), layer.tiles.grid, layer.sigma,
                          layer.program_error, layer.calibration_error, layer.dead_positions)
            for name, layer in self.maps.items()]

    @torch.no_grad()
    def __call__(self, tokens: torch.Tensor, *, generator: keys.Seed, sequences: torch.Tensor | None = None,
                 **options):
        """`ImplicitSSM.forward` on the device (same options), after `reset(generator)`.

        `sequences`: the ids [B] of the sequences (default 0 ... B - 1), which key their noise: run a
        sequence with the id it has in a larger batch and it draws what it draws there.
        """
        self.reset(generator)
        tokens = self.model.check_tokens(tokens)
        b, length = tokens.shape
        if sequences is None:
            sequences = torch.arange(b)
        if (not isinstance(sequences, torch.Tensor) or sequences.dtype not in (torch.int64, torch.int32)
                or tuple(sequences.shape) != (b,) or bool((sequences < 0).any())):
            raise InputError(f"sequences = {sequences!r}; expected None or an integer tensor [{b}] of ids >= 0")
        context = TokenKeys(sequences.long(), length)
        parts = [*self.maps.values(), *self.functions.values()]
        for layer in parts:
            layer.token_keys = context
        self.model.pass_hook = context.announce
        try:
            return self.model(tokens, **options)
        finally:
            self.model.pass_hook = None
            for layer in parts:
                layer.token_keys = None


def linear_maps(model: ImplicitSSM) -> dict[str, nn.Linear]:
    """The linear maps inside f, by module path: the injection and each block's projections."""
    maps = {"inject": model.inject}
    for i, block in enumerate(model.blocks):
        maps[f"blocks.{i}.in_proj"] = block.in_proj
        maps[f"blocks.{i}.out_proj"] = block.out_proj
    return maps


@torch.no_grad()
def calibration_inputs(model: ImplicitSSM, tokens: torch.Tensor, *, rows: int = CALIBRATION_ROWS,
                       tau: float = 0.8, max_iter: int = 100, seed: int = 0) -> dict[str, torch.Tensor]:
    """What each linear map sees on the exact path (simultaneous mode) for `tokens`, `rows` per map,
    and per block ("blocks.i.elementwise") the smallest and largest x and the largest |f(x)| at each
    elementwise site [3, 3].

    The rows are drawn without replacement from every call of the solve (iterates on the way to
    the fixed point included: the device sees those too), by a generator seeded with `seed`.
    """
    seen: dict[str, list[torch.Tensor]] = {name: [] for name in linear_maps(model)}
    hooks = [module.register_forward_pre_hook(lambda _m, args, name=name: seen[name].append(
        args[0].reshape(-1, args[0].shape[-1]).clone())) for name, module in linear_maps(model).items()]
    peaks = recorders(model)  # and the elementwise functions' ranges (analog placement)
    try:
        model(tokens, mode="simultaneous", tau=tau, tol=1e-6, max_iter=max_iter)
    finally:
        for h in hooks:
            h.remove()
        restore(model)
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, chunks in seen.items():
        every = torch.cat(chunks)
        pick = torch.randperm(every.shape[0], generator=gen)[:rows]
        out[name] = every[pick]
    for i, recorder in enumerate(peaks):
        out[f"blocks.{i}.elementwise"] = recorder.peak
    return out


def place_ssm(model: ImplicitSSM, device: DeviceProfile, calibration: dict[str, torch.Tensor], *,
              generator: keys.Seed, tile_size: int | None = None, partial_sums: str = "analog",
              on_tiles: tuple[str, ...] = MAP_KINDS, elementwise: str = "digital", averaging: int = 1,
              predistort: bool = False) -> PlacedSSM:
    """Place `model` on `device` (one chip, one weight load keyed by `generator`).

    Args:
        model: an implicit (or explicit) SSM; it is copied, not changed.
        device: the profile of the chip.
        calibration: inputs per map (`calibration_inputs`).
        generator: seed of the weight load (programming draws) and of the calibration passes.
        tile_size, partial_sums: as in `TiledMatrix`.
        on_tiles: which kinds of linear map go onto tiles (`MAP_KINDS`, the default: all); the others
            stay digital. Each map keeps its noise stream whatever the choice.
        elementwise: "digital" (exact SiLU and softplus) or "analog" (aocsim/execute/elementwise.py).
        averaging: tile passes averaged per product of every map on tiles (`DeviceLinear`).
        predistort: every map's emitter drive linearised before the DAC (`TiledMatrix`).
    """
    kinds = check_on_tiles(on_tiles)
    check_averaging(averaging)
    check_predistort(predistort)
    check_elementwise(elementwise)
    if not isinstance(model, ImplicitSSM):
        raise InputError(f"model is a {type(model).__name__}; expected an ImplicitSSM")
    key = keys.as_key(generator)
    if key is None:
        raise InputError("generator = None; placing the model draws its weight load, so expected a seed, "
                         "torch.Generator or Key")
    wanted = [n for n in linear_maps(model) if n.split(".")[-1] in kinds]
    missing = [n for n in wanted if not isinstance(calibration, dict) or n not in calibration]
    if missing:
        raise InputError(f"calibration has no inputs for {missing[0]!r}; expected calibration_inputs(model, tokens) "
                         f"(one [R, K] tensor per map: {wanted})")
    placed = plain_copy(model)
    layers: dict[str, DeviceLinear] = {}
    for m, (name, linear) in enumerate(linear_maps(placed).items()):
        if name.split(".")[-1] not in kinds:
            continue
        bias = None if linear.bias is None else linear.bias.detach().clone()
        layer = DeviceLinear(device, linear.weight.detach(), bias, calibration[name], generator=key.fold(m),
                             tile_size=tile_size, partial_sums=partial_sums, averaging=averaging,
                             predistort=predistort)
        layers[name] = layer
        parent, attr = (placed, name) if "." not in name else (placed.blocks[int(name.split(".")[1])],
                                                              name.split(".")[2])
        setattr(parent, attr, layer)
    functions: dict[str, AnalogElementwise] = {}
    if elementwise == "analog":
        for i, block in enumerate(placed.blocks):
            name = f"blocks.{i}.elementwise"
            if not isinstance(calibration, dict) or name not in calibration:
                raise InputError(f"calibration has no {name!r}; expected calibration_inputs(model, tokens)")
            block.elementwise = functions[name] = AnalogElementwise(
                device, i, scales_of(calibration[name]), site_channels(placed.config), placed.head.weight.dtype,
                generator=key.fold(len(linear_maps(placed)) + i))
    return PlacedSSM(placed, layers, functions)
