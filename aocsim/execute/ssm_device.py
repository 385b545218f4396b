"""The mechanics of an implicit SSM on tiles: the model copied with its linear maps swapped for
`DeviceLinear`s (and, with analog elementwise functions, its SiLU and softplus for circuits), what
each map sees on the exact path (`calibration_inputs`), and a run keyed per token (`PlacedSSM`).
The same functions place any model whose blocks are `Mamba2Block`s: the plain Mamba2 language model
(aocsim/nn/mamba2_lm.py: no injection, one pass; its placement class is aocsim/execute/mamba2.py).

The model's own code runs with its modules swapped, so both execution modes run on the device; in
sequential mode the placed model runs its own token loop (aocsim/execute/token_loop.py). Noise is keyed
by token: the run observes each pass of tokens through the maps (the model's `on_pass`: the positions
and their visit, aocsim/nn/ssm_token.py); a `PlacedSSM` run tells its maps the sequences' ids,
so the pass of token (s, t) at visit v through map m draws from key.fold(m).fold(TILE_CALL, v, i)
for tile i at counter s L + t. A run is reproducible from its seed (`PlacedSSM.reset`), and in
sequential mode a sequence's run does not depend on the batch it is in (given its id; simultaneous
mode freezes converged prefixes per batch), nor on whether each row waits for its batch at every
token or moves on alone (aocsim/execute/ssm_rows.py, where every part keys its draws per row), in
statistics. The placement class is aocsim/execute/hybrid.py.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from dataclasses import replace
from typing import Iterator

import numpy as np
import torch
from torch import nn

from aocsim.errors import InputError
from aocsim.execute.elementwise import AnalogElementwise, recorders, restore, scales_of, site_channels
from aocsim.execute.compiled_mix import install_compiled_mix
from aocsim.execute.device_linear import DeviceLinear
from aocsim.execute.inputs import sequence_ids
from aocsim.execute.map_fit import MapProgram, fit_key, fit_maps_population
from aocsim.execute.token_keys import TokenKeys
from aocsim.execute.token_loop import KeyedRun, TokenLoop
from aocsim.execute.placement import Placement
from aocsim.hardware.engine import keys
from aocsim.hardware.physics.energy import Activity, load_shares
from aocsim.hardware.profiles.profile import DeviceProfile
from aocsim.nn.implicit_ssm import ImplicitSSM
from aocsim.nn.mamba2_lm import Mamba2LM

CALIBRATION_ROWS = 2048  # inputs per map for the fit (subsampled from the exact path's)
ANY_SIZE_TILE = 48  # tiles on a profile of any size (channels: null): those of aoc48


def sized(placement: Placement, profile: DeviceProfile) -> Placement:
    """`placement` with tile_size `ANY_SIZE_TILE` where it leaves the size to a profile of any size."""
    if placement.tile_size is None and profile.channels is None:
        return Placement(**{**placement.given(), "tile_size": ANY_SIZE_TILE})
    return placement


def plain_copy(model: ImplicitSSM | Mamba2LM) -> ImplicitSSM | Mamba2LM:
    """A copy of `model` with weight normalisation resolved into the plain matrices it parametrises (a
    Mamba2LM's maps are plain: copied as they are)."""
    if not isinstance(model, ImplicitSSM):
        return copy.deepcopy(model).eval()
    plain = ImplicitSSM(replace(model.config, weight_norm=False)).to(model.head.weight.dtype)
    state = {name: value for name, value in model.state_dict().items() if ".parametrizations." not in name}
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            state[f"{name}.weight"] = module.weight.detach()
    plain.load_state_dict(state)
    return plain.eval()


class PlacedSSM:
    """An `ImplicitSSM` (or a `Mamba2LM`) whose linear maps run on a device (module docstring). Call it
    like the model."""

    def __init__(self, model: ImplicitSSM | Mamba2LM, maps: dict[str, DeviceLinear],
                 functions: dict[str, AnalogElementwise] | None = None, *, rows_alone: bool = True) -> None:
        self.model = model
        self.rows_alone = rows_alone  # a token's passes carry only its rows still iterating (token_loop)
        self.maps = maps
        self.functions = functions or {}  # analog elementwise functions by block ("blocks.i.elementwise")
        names = [*linear_maps(model), *(f"blocks.{i}.elementwise" for i in range(len(model.blocks)))]
        self.index = {name: i for i, name in enumerate(names)}  # stable noise streams
        # rows on their own tokens (aocsim/execute/ssm_rows.py) where every part keys its noise per row: digital
        # elementwise functions, tiles whose weights stay (a time-multiplexed reload follows the visit)
        self.independent = not self.functions and not any(layer.tiles.multiplexed for layer in maps.values())
        # compiled tile products (a seed stack's maps never are; nn.Module.compile is a method, not this switch)
        self.compiled = any(isinstance(layer, DeviceLinear) and layer.compile for layer in maps.values())

    def reset(self, generator: keys.Seed) -> None:
        """Give every map a fresh call count under key.fold(m): a run reproducible from its seed."""
        key = keys.as_key(generator)
        if key is None:
            raise InputError("generator = None; a device run draws noise on every tile pass, so expected a "
                             "seed, torch.Generator or Key")
        for name, layer in [*self.maps.items(), *self.functions.items()]:
            layer.reset(key.fold(self.index[name]))

    def activity(self, iterations: torch.Tensor) -> Activity:
        """What the machine did per token [B, L] given each token's iterations: the injection's products
        once (tokens enter once), then every iteration the projections' products and the analog
        functions' conversions (`DeviceLinear.activity`, `AnalogElementwise.activity`). Each map has
        its own modules: the machine powers all of them."""
        each = [layer.activity(loads=False) for name, layer in self.maps.items() if name != "inject"]
        each += [functions.activity() for functions in self.functions.values()]
        per_iteration = sum(each[1:], each[0]) if each else Activity(0.0)
        its = iterations.double().cpu().numpy()
        total = per_iteration * its
        # a time-multiplexed product's weight loads are shared by the sequences run together in it
        loads = [layer.load_activity() for name, layer in self.maps.items() if name != "inject"]
        if loads:
            total = total + sum(loads[1:], loads[0]) * load_shares(its)
        if "inject" in self.maps:
            inject = self.maps["inject"]
            total = total + inject.activity(loads=False) + inject.load_activity() * load_shares(np.ones_like(its))
        return dataclasses.replace(total, modules=self.modules or None)

    @property
    def modules(self) -> int:
        """The optical modules of the machine: one per tile of every map, or the time-multiplexed count."""
        mounts = [layer.tiles.mount for layer in self.maps.values()]
        if any(m.multiplexed for m in mounts):
            return mounts[0].count
        return sum(layer.tiles.modules for layer in self.maps.values())

    def token_keys(self, sequences: torch.Tensor, length: int) -> TokenKeys:
        """What keys a run's passes (the batch rows' sequence ids [B])."""
        return TokenKeys(sequences, length)

    @contextlib.contextmanager
    def keyed(self, generator: keys.Seed, sequences: torch.Tensor, length: int, extras: tuple = (),
              extras_key: keys.Seed = None) -> Iterator[KeyedRun]:
        """While open, the placed model's passes draw noise keyed by `generator` (`reset`), the
        sequences' ids [B] and their positions in sequences of `length` tokens; yields the run (`KeyedRun`).
        `extras`: parts attached to the model for the run and keyed per token too (noise injection's,
        aocsim/execute/snr.py: noise set by an SNR, drawing from `extras_key`; an EMA readout; the
        reference's token iteration)."""
        self.reset(generator)
        context = self.token_keys(sequences.long(), length)
        parts = [*self.maps.values(), *self.functions.values(), *extras]
        for layer in parts:
            layer.token_keys = context
        for part in extras:
            part.reset(extras_key)
            part.attach(self.model)
        # rows on their own tokens where they are evaluated alone, or with compiled products in whole-batch
        # passes (one graph); not with extras (keyed by the pass's visit)
        loop = TokenLoop(rows_alone=self.rows_alone, own_tokens=(self.rows_alone or self.compiled) and self.independent
                         and not extras, full_passes=self.compiled, commits=tuple(part.commit for part in extras),
                         solver=next((part for part in extras if part.solves_tokens), None))
        try:
            yield KeyedRun(self.model, context.announce, loop)
        finally:
            for part in extras:
                part.detach(self.model)
            for layer in parts:
                layer.token_keys = None

    @torch.no_grad()
    def __call__(self, tokens: torch.Tensor, *, generator: keys.Seed, sequences: torch.Tensor | None = None,
                 extras: tuple = (), extras_key: keys.Seed = None, **options):
        """`ImplicitSSM.forward` on the device (same options), its noise keyed by `generator`.

        `sequences`: the ids [B] of the sequences (default 0 ... B - 1), which key their noise: run a
        sequence with the id it has in a larger batch and it draws what it draws there. `extras`,
        `extras_key`: as for `keyed`; each part then reads the output anew (`output`: an EMA readout's z).
        """
        tokens = self.model.check_tokens(tokens)
        with self.keyed(generator, sequence_ids(sequences, tokens.shape[0]), tokens.shape[1], extras,
                        extras_key) as run:
            out = run(tokens, **options)
        for part in extras:
            out = part.output(out, self.model)
        return out


def install(model: ImplicitSSM | Mamba2LM, name: str, layer: nn.Module) -> None:
    """`layer` in place of the model's map `name` (`linear_maps`)."""
    parent, attr = (model, name) if "." not in name else (model.blocks[int(name.split(".")[1])], name.split(".")[2])
    setattr(parent, attr, layer)


def linear_maps(model: ImplicitSSM | Mamba2LM) -> dict[str, nn.Linear]:
    """The linear maps inside f, by module path: the injection (a model that has one) and each block's
    projections."""
    maps = {"inject": model.inject} if isinstance(model, ImplicitSSM) else {}
    for i, block in enumerate(model.blocks):
        maps[f"blocks.{i}.in_proj"] = block.in_proj
        maps[f"blocks.{i}.out_proj"] = block.out_proj
    return maps


@torch.no_grad()
def calibration_inputs(model: ImplicitSSM | Mamba2LM, tokens: torch.Tensor, *, rows: int = CALIBRATION_ROWS,
                       tau: float = 0.8, max_iter: int = 100, seed: int = 0) -> dict[str, torch.Tensor]:
    """What each linear map sees on the exact path (simultaneous mode; a Mamba2LM's one pass) for
    `tokens`, `rows` per map, and per block ("blocks.i.elementwise") the smallest and largest x and
    the largest |f(x)| at each elementwise site [3, 3].

    The rows are drawn without replacement from every call of the solve (iterates on the way to
    the fixed point included: the device sees those too), by a generator seeded with `seed`.
    """
    seen: dict[str, list[torch.Tensor]] = {name: [] for name in linear_maps(model)}
    hooks = [module.register_forward_pre_hook(lambda _m, args, name=name: seen[name].append(
        args[0].reshape(-1, args[0].shape[-1]).clone())) for name, module in linear_maps(model).items()]
    peaks = recorders(model)  # and the elementwise functions' ranges (analog placement)
    try:
        if isinstance(model, ImplicitSSM):
            model(tokens, mode="simultaneous", tau=tau, tol=1e-6, max_iter=max_iter)
        else:  # one pass, no fixed point
            model(tokens)
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


def on_tiles(model: ImplicitSSM | Mamba2LM, placement: Placement) -> list[str]:
    """The names of the maps the placement puts on tiles, in `linear_maps` order. An explicit SSM's
    one pass starts at z = 0, so its first block reads RMSNorm(0) = 0: that input projection only
    ever multiplies zero and needs no tiles (it stays digital). A Mamba2LM's first block reads the
    embedding: every map it names goes on tiles."""
    idle = {"blocks.0.in_proj"} if isinstance(model, ImplicitSSM) and not model.config.implicit else set()
    return [n for n in linear_maps(model) if n.split(".")[-1] in placement.on_tiles and n not in idle]


def tiled_shapes(model: ImplicitSSM | Mamba2LM, placement: Placement) -> dict[str, tuple[int, int]]:
    """[M, K] of each map on tiles (`on_tiles`): the SSM kinds' `fitted_maps`."""
    maps = linear_maps(model)
    return {n: (maps[n].out_features, maps[n].in_features) for n in on_tiles(model, placement)}


def fit_programs(model: ImplicitSSM | Mamba2LM, device: DeviceProfile, calibration: dict[str, torch.Tensor],
                 placement: Placement) -> dict[str, MapProgram]:
    """What the chip `device` describes holds for each map on tiles (`fit_maps`, keyed by the chip and
    the map's index): fitted once per chip, loaded by every seed. A population of one: `fit_programs_population`."""
    return fit_programs_population(model, [device], calibration, placement)[0]


def fit_programs_population(model: ImplicitSSM | Mamba2LM, devices: list[DeviceProfile],
                            calibration: dict[str, torch.Tensor], placement: Placement) -> list[dict[str, MapProgram]]:
    """`fit_programs` for each design point of a population on one chip, fitted together
    (`map_fit.fit_maps_population`)."""
    missing = [n for n in on_tiles(model, placement) if not isinstance(calibration, dict) or n not in calibration]
    if missing:
        raise InputError(f"calibration has no inputs for {missing[0]!r}; expected calibration_inputs(model, tokens) "
                         f"(one [R, K] tensor per map: {on_tiles(model, placement)})")
    maps = linear_maps(plain_copy(model))
    index = {name: m for m, name in enumerate(maps)}
    names = on_tiles(model, placement)
    keyed = [(maps[n].weight.detach(), calibration[n], fit_key(devices[0], index[n])) for n in names]
    return [dict(zip(names, programs)) for programs in fit_maps_population(devices, keyed, placement.tile)]


def place_ssm(model: ImplicitSSM | Mamba2LM, device: DeviceProfile, calibration: dict[str, torch.Tensor], placement: Placement,
              *, generator: keys.Seed, programs: dict[str, MapProgram] | None = None) -> PlacedSSM:
    """`model` on `device` (one chip, one weight load keyed by `generator`), as the resolved
    `placement` says (which maps on tiles, tile size, partial sums, averaging, predistortion,
    elementwise functions); `calibration`: inputs per map (`calibration_inputs`); `programs`: the
    chip's fitted programs (`fit_programs`; None: fitted here). The model is copied, not changed;
    each map keeps its noise stream whatever maps go on tiles."""
    key = keys.as_key(generator)
    if key is None:
        raise InputError("generator = None; placing the model draws its weight load, so expected a seed, "
                         "torch.Generator or Key")
    programs = fit_programs(model, device, calibration, placement) if programs is None else programs
    placed = plain_copy(model)
    layers: dict[str, DeviceLinear] = {}
    for m, (name, linear) in enumerate(linear_maps(placed).items()):
        if name not in programs:
            continue
        bias = None if linear.bias is None else linear.bias.detach().clone()
        layer = DeviceLinear(device, linear.weight.detach(), bias, calibration[name], generator=key.fold(m),
                             program=programs[name], tile=placement.tile)
        layers[name] = layer
        install(placed, name, layer)
    if placement.compile and placement.elementwise != "analog":  # the digital middle compiled too
        install_compiled_mix(placed)
    functions: dict[str, AnalogElementwise] = {}
    if placement.elementwise == "analog":
        for i, block in enumerate(placed.blocks):
            name = f"blocks.{i}.elementwise"
            block.elementwise = functions[name] = AnalogElementwise(
                device, i, scales_of(calibration[name]), site_channels(placed.config), placed.head.weight.dtype,
                generator=key.fold(len(linear_maps(placed)) + i))
    # A token's passes cost what its rows still iterating cost, and each row moves on to its next token once
    # it stops (aocsim/execute/token_loop.py, `PlacedSSM.keyed`); compiled tile products keep whole batches
    # (a graph per batch size would compile again at every size): all rows on their own tokens in passes
    # padded to the batch, or token by token where a part keys by the pass.
    return PlacedSSM(placed, layers, functions, rows_alone=not placement.compile)
