"""The seeds of one chip run as one batch (`stack_seeds`): every seed's weight loads stacked.

A compare runs each chip with several seeds: each seed loads every map anew (its programming draws,
its calibration) and draws its own noise. Run one after another, S seeds cost S times the passes
of one, and a pass of a few sequences costs mostly per-operation overhead. Stacked, the S runs are
one batch of S B rows (seed s's rows s B ... (s + 1) B - 1): the digital parts of the model run on
all of them at once, and each map's tile products run as one product of its S loads
(`tile_product.LoadStack`), each row through its own seed's load, calibrated by that load's gain and
offset, its noise keyed by its seed's run key, sequence id and position, as alone. A seed's results
are its results run alone to the rounding of a product over more rows: the same draws, the same
statistics, not always the same bits (a kernel can change with the rows, and an ADC turn a last bit
into another code; tests/execute/test_seed_stack.py states the tolerance).

What only a run alone can do (`stackable`): simultaneous mode (its frozen prefixes are the batch's),
analog elementwise functions, and compiled tile products (a graph per batch size) run seed by seed;
so do runs with noise injection's parts (noise drawn at a site for an SNR, the EMA readout, a stop test
over the batch: their streams and stop tests are a run's), which its wrapper runs seed by seed
(aocsim/execute/noise_injection.py; `snr_kind` 'device' only scales the profile's noise, and stacks).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from aocsim.errors import InputError
from aocsim.execute.device_linear import DeviceLinear
from aocsim.execute.placement import Placement
from aocsim.execute.inputs import sequence_ids
from aocsim.execute.ssm_device import PlacedSSM, install, linear_maps, plain_copy
from aocsim.execute.token_keys import TokenKeys
from aocsim.hardware.engine import keys
from aocsim.hardware.engine.tile_product import LoadStack
from aocsim.nn.implicit_ssm import ImplicitSSM, SSMOutput

def stackable(placement: Placement) -> bool:
    """Whether a placement's runs can be stacked over seeds (module docstring)."""
    s = placement
    return (s.mode == "sequential"
            and s.elementwise != "analog" and not s.compile and bool(s.on_tiles))


class StackedLinear(nn.Module):
    """One map's weight loads for S seeds (`DeviceLinear`s of one chip's program), each on the batch
    rows of its seed (`TokenKeys.loads`): one tile product per call."""

    def __init__(self, layers: list[DeviceLinear]) -> None:
        super().__init__()
        self.layers = layers  # a plain list: their tensors are not this module's parameters
        first = layers[0]
        self.in_features, self.out_features, self.tiles = first.in_features, first.out_features, first.tiles
        self.parts = {tuple(range(len(layers))): LoadStack([layer.tiles for layer in layers])}  # by loads in it
        # each load's column of input k: a population's programs may skip different dead input positions
        # (`LoadStack`: the same grid of tiles, rows as wide as the widest program)
        self.columns, self.width = torch.stack([layer.columns for layer in layers]), max(l.width for l in layers)
        self.gain = torch.stack([layer.gain for layer in layers])  # [S, M]
        self.offset = torch.stack([layer.offset for layer in layers])
        self.sigma = torch.tensor([layer.sigma for layer in layers], dtype=self.gain.dtype)  # [S] (a population's)
        self.run_keys = [layer.run_key for layer in layers]
        self.token_keys: TokenKeys | None = None

    def reset(self, generators: list[keys.Key]) -> None:
        """Each load's noise key for a run (one per seed)."""
        self.run_keys = list(generators)

    def activity(self, *, loads: bool = True):  # every load is the same program on the same tiles
        return self.layers[0].activity(loads=loads)

    def load_activity(self):  # each seed's rows share their own load
        return self.layers[0].load_activity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = self.token_keys
        if rows is None or rows.positions is None or rows.loads is None:
            raise InputError("a StackedLinear runs inside a stacked run only (aocsim/execute/seed_stack.py); "
                             "expected a pass announced to its TokenKeys (PlacedSSM.keyed)")
        first, count = self.layers[0], len(self.layers)
        flat = x.reshape(-1, self.in_features)
        if (flat.shape[0], count) not in rows.shared:  # the pass's other maps group their rows alike
            grouping = _grouping(rows, tuple(x.shape[:-1]), count)
            rows.shared[flat.shape[0], count] = tuple(g.to(flat.device) if isinstance(g, torch.Tensor) else g
                                                      for g in grouping)  # the ids kept with the rows' device
        load, order, slot, group, ids, calls, active = rows.shared[flat.shape[0], count]
        if active not in self.parts:  # the loads with rows in this pass (a population's points finish apart):
            # kept beside the whole stack only until the next (a run's loads only ever drop out), since each
            # holds a copy of its loads' stacked constants
            whole = tuple(range(count))
            self.parts = {whole: self.parts[whole], active: LoadStack([self.layers[i].tiles for i in active])}
        t = flat.new_zeros(len(active) * group, self.width)
        t[slot[:, None], self.columns.to(flat.device)[load[order]]] = flat[order]  # each row on its load's columns
        out = self.parts[active](t, [self.run_keys[i] for i in active], ids, partial_sums=first.partial_sums,
                                 call=calls, passes=first.averaging)
        node, scale = torch.empty_like(out.y[:flat.shape[0]]), torch.empty_like(out.input_scale[:flat.shape[0]])
        node[order] = out.nodes[slot]
        scale[order] = out.input_scale[slot]
        y = first.output(node, scale, self.gain[load], self.offset[load], self.sigma[load])
        return y.reshape(*x.shape[:-1], self.out_features)


def _grouping(rows: TokenKeys, leading: tuple[int, ...], count: int) -> tuple[Any, ...]:
    """A pass's rows grouped by load, G per load: as many as the largest load has (a load's rows still
    iterating; the empty places are zero inputs, discarded), a load without rows in the pass left out.
    Returns each flat row's load, the order that groups them, each one's place in the groups, G, the
    places' stream indices [A G] and their call (the pass's visit, or each place's own [A G] with rows on
    their own tokens), and the A loads with rows."""
    samples, batch = rows.samples(leading), rows.batch_rows()
    per = samples.shape[0] // batch.numel()  # positions per row
    load = rows.loads[batch].repeat_interleave(per)
    counts = torch.bincount(load, minlength=count)
    active, place = counts.nonzero().squeeze(1), torch.cumsum(counts > 0, 0) - 1  # a load's place among them
    group = int(counts.max())
    order = torch.argsort(load, stable=True)
    starts = torch.cumsum(counts, 0) - counts
    slot = place[load[order]] * group + torch.arange(len(order), device=load.device) - starts[load[order]]
    ids = samples.new_zeros(active.numel() * group)
    ids[slot] = samples[order]
    calls = rows.calls()
    if isinstance(calls, torch.Tensor):
        calls = calls.new_zeros(active.numel() * group).index_put_((slot,), calls[order])
    return load, order, slot, group, ids, calls, tuple(active.tolist())


class StackedSSM(PlacedSSM):
    """S seeds' `PlacedSSM`s of one chip as one model (`stack_seeds`); call it with one key per seed."""

    def __init__(self, model: ImplicitSSM, maps: dict[str, StackedLinear]) -> None:
        super().__init__(model, maps)  # type: ignore[arg-type]
        self.loads = len(next(iter(maps.values())).layers)

    def reset(self, generator: keys.Seed) -> None:
        """Every map's S noise keys: seed s's run key folded by the map's index (as `PlacedSSM.reset`)."""
        for name, layer in self.maps.items():
            layer.reset([key.fold(self.index[name]) for key in generator])  # type: ignore[union-attr]

    def token_keys(self, sequences: torch.Tensor, length: int) -> TokenKeys:
        per = len(sequences) // self.loads
        return TokenKeys(sequences, length,
                         loads=torch.arange(self.loads, device=sequences.device).repeat_interleave(per))

    @torch.no_grad()
    def __call__(self, tokens: torch.Tensor, *, generator: list[keys.Key], sequences: torch.Tensor | None = None,
                 **options) -> list[SSMOutput]:  # type: ignore[override]
        """Every seed's output for `tokens` [B, L] (its run key in `generator`), as `PlacedSSM.__call__`."""
        if len(generator) != self.loads:
            raise InputError(f"generator has {len(generator)} keys; expected one per stacked seed ({self.loads})")
        tokens = self.model.check_tokens(tokens)
        ids = sequence_ids(sequences, tokens.shape[0])
        with self.keyed(generator, ids.repeat(self.loads), tokens.shape[1]) as run:  # type: ignore[arg-type]
            out = run(tokens.repeat(self.loads, 1), **options)
        return [_seed_part(out, s, tokens.shape[0]) for s in range(self.loads)]


def _seed_part(out: SSMOutput, s: int, batch: int) -> SSMOutput:
    """Seed s's rows of a stacked output; its trace cut after its own last evaluation (as run alone)."""
    rows = slice(s * batch, (s + 1) * batch)
    trace = out.trace
    if trace is not None:
        trace = trace[rows]
        seen = (~torch.isnan(trace)).flatten(0, -2).any(0).nonzero()
        trace = trace[..., : int(seen.max()) + 1 if seen.numel() else trace.shape[-1]]
    return SSMOutput(out.logits[rows], out.z[rows], out.iterations[rows], out.residuals[rows], trace)


def stack_seeds(model: ImplicitSSM, seeds: list[PlacedSSM]) -> StackedSSM:
    """The placed seeds of one chip (`place_ssm`, each its own weight load of the chip's programs) as one model."""
    stacked = plain_copy(model)
    maps = {name: StackedLinear([seed.maps[name] for seed in seeds]) for name in linear_maps(stacked)
            if name in seeds[0].maps}
    for name, layer in maps.items():
        install(stacked, name, layer)
    return StackedSSM(stacked, maps)
