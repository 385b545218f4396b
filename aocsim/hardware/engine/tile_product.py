"""A tiled product through one weight load or a stack of loads of the same program (`LoadStack`).

`TiledMatrix.__call__` checks its arguments and runs its load as a stack of one. Several loads of one
chip's program (the weight loads of a compare's seeds, each with its own programming draws, run key
and calibration) run as one product: the rows come in S groups of G, group s through load s, and
every tile of every load is one batched call of the step's optical stage (`tile_pass`, `Plan.loads`).
A row draws what it draws through its own load alone: its tile streams are its load's key folded as
for one load, its counters its own sample index, so a stack changes no draw, only how many kernel
calls there are (a product's rounding can follow its rows below 4 of them: aocsim/execute/seed_stack.py
pads a load's group to the rows it has alone). The loads may also be a population's: design points of one
shape whose profiles differ only in `PER_LOAD` values, which act through each load's own constants (its
programming, light and noise) or through the ADC's code step, run per row. What the loads share (the DAC,
the ADC's range, the emitters' measured cubics, the hold's gates, the loop gain) is read from the first load.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np
import torch

from aocsim.errors import InputError
from aocsim.hardware.engine import keys
from aocsim.hardware.engine.emitter_calibration import shared_shapes, tile_shapes
from aocsim.hardware.engine.partial_sums import hold_draws, hold_gates
from aocsim.hardware.engine.step import Constants, stack_loads
from aocsim.hardware.engine.tile_pass import Plan, run
from aocsim.hardware.physics import components as C
from aocsim.hardware.physics.hold import Hold


@dataclass(frozen=True)
class TiledProduct:
    """One tiled product and what it cost (ready for an energy model).

    y: [B, M] in W t units. grid: (rows, cols) of tiles; tiles = rows * cols; tile_size, channels.
    input_scale: s_in [B]. partials: [cols, B, M] node volts before the ADC (keep_partials=True).
    Conversions count values that carry data: a DAC conversion per real input per tile pass
    (rows * K per sample), an ADC conversion per real output (M, analog) or per tile output
    (cols * M, digital); padded channels convert nothing.
    """

    y: torch.Tensor
    grid: tuple[int, int]
    tile_size: int
    channels: int
    partial_sums: str
    batch: int
    dac_conversions_per_sample: int
    adc_conversions_per_sample: int
    adc_clipped: int
    input_scale: torch.Tensor
    partials: torch.Tensor | None = None

    @property
    def tiles(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def nodes(self) -> torch.Tensor:
        """[B, M]: the readings in node volts, y / s_in (what the ADC saw, before the digital scaling)."""
        return self.y / self.input_scale[:, None]

    @property
    def dac_conversions(self) -> int:
        return self.dac_conversions_per_sample * self.batch

    @property
    def adc_conversions(self) -> int:
        return self.adc_conversions_per_sample * self.batch


# Bytes of a product's largest temporaries (a load's rows times its tiles, passes and channels): a larger product
# runs in pieces of rows and loads (`LoadStack._piece`), so that its elementwise passes stay in a core's cache
# (a5-implicit at the recommended placement, float32, 16 passes of 14 tiles: 24 rows a piece, a third faster per
# row than 384 at once; a tile program's float64 probes: fits 5-25 % faster than in pieces of 4 MiB).
# A row's result in pieces is the result in one piece to rounding: a BLAS kernel can change with a call's rows
# (this machine's MKL takes a call's last rows mod 4 with other kernels), and an ADC can turn a last bit into
# another code, so the two agree in statistics (tests/hardware/test_load_stack.py states the tolerance).
CHUNK_BYTES = 1 << 20

# Profile values in which a stack's loads may differ (a population of design points, or a compare's chips, run
# as one product): each acts through its load's own constants (`TiledMatrix.stacked`: the SLM's programming,
# the detectors' light and noise, the chip's static draws) or through what the product takes per row: the ADC's
# code step, and the hold's kT/C, gain and shift on analog partial sums (`LoadStack._hold`); `energy.*` and the
# names price or describe and never enter a product.
# tests/hardware/test_load_stack.py runs a stack of loads differing in each against the loads alone.
PER_LOAD = ("slm.bits", "slm.programming_error_levels", "noise.power_per_unit_w",
            "noise.bias_units", "noise.rin.rin_db_per_hz", "noise.responsivity_a_per_w", "readout.adc_bits",
            "variation.chip_seed", "variation.relative_std", "noise.multiplier", "noise.thermal.temperature_k",
            "noise.dark.current_a", "readout.hold_capacitance_f", "environment.temperature_delta_k")
_DESCRIBING = ("energy.", "name", "description", "provenance.")


def shared_values(profile: Any) -> str:
    """A profile's values that every load of a stack must share (all but `PER_LOAD` and what only prices or
    describes), as canonical JSON: equal strings, loads of one stack."""
    return json.dumps({k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in profile.values.items()
                       if k not in PER_LOAD and not k.startswith(_DESCRIBING)}, sort_keys=True, default=str)


def _rows(values: torch.Tensor, lo: int, hi: int, loads: int) -> torch.Tensor:
    """Rows lo ... hi - 1 of each of the `loads` groups of `values` [S G, ...], as [S (hi - lo), ...]."""
    return values.view(loads, -1, *values.shape[1:])[:, lo:hi].flatten(0, 1)


def converter(span: object, bits: int | None) -> tuple[float, float, float]:
    """(low, high, step) of a converter over `span` (None: no clipping) with 2^bits codes (None: step 0, unused)."""
    low, high = (0.0, 0.0) if span is None else (float(b) for b in span)  # type: ignore[union-attr]
    return low, high, C.code_step(low, high, bits) if bits is not None else 0.0


class LoadStack:
    """Weight loads (`TiledMatrix`s) of one program on one chip, or of a population's programs of one shape,
    run as one product (module docstring).

    Every load must hold a matrix of the same outputs on the same tiles, modules and drive: the profile's
    values but `PER_LOAD` (`shared_values`), grid, tile size, mount, input range and predistortion (a
    one-line error otherwise). Its inputs may differ on that grid (a population's programs skip different
    dead positions): the rows come as wide as the widest, and a row's columns past its load's are undriven."""

    def __init__(self, loads: Sequence[Any]) -> None:
        if not loads:
            raise InputError("loads = []; expected at least one weight load (TiledMatrix)")
        first = loads[0]
        values = shared_values(first.profile) if len(loads) > 1 else ""  # (a load alone: nothing to compare)
        for i, load in enumerate(loads[1:], 1):
            same = (shared_values(load.profile) == values, load.weight.shape[0] == first.weight.shape[0],
                    load.grid == first.grid,
                    load.tile_size == first.tile_size, load.mount == first.mount,
                    load.input_range == first.input_range, load.predistort == first.predistort,
                    load.weight.dtype == first.weight.dtype,
                    load.loops[0].layout() == first.loops[0].layout())  # (a noise set to 0 draws nothing)
            if not all(same):
                raise InputError(f"loads[{i}] is not a load of loads[0]'s program (profile but {', '.join(PER_LOAD)}, "
                                 "outputs, grid of tiles, tile size, mount, input range, predistortion, dtype and "
                                 "which noises draw must agree); expected loads of one chip's map or of one shape")
        self.loads = list(loads)
        self._adc_bits = [load.profile.parts.readout.adc_bits for load in loads]  # per load: the code step per row
        if len({b is None for b in self._adc_bits}) > 1:
            raise InputError(f"readout.adc_bits = {self._adc_bits} over the loads; expected all integers or all None "
                             "(an ADC on every load or on none)")
        self._constants: tuple[Constants, torch.Tensor] | None = None  # stacked once (not time-multiplexed)
        self._shapes: dict[tuple, Any] = {}  # the loads' predistortion cubics by (dtype, device): `_shapes`
        self._steps: dict[tuple, torch.Tensor] = {}  # a population's ADC steps per row, by (dtype, device, rows)
        self._widths: dict[tuple, torch.Tensor] = {}  # each row's load's inputs by (inputs, device, rows)
        self._holds: dict[tuple, Any] = {}  # the hold by (passes, dtype, device), per row by (..., rows): `_hold`
        self._parts: dict[tuple, list[LoadStack]] = {}  # sub-stacks by (loads each, dtype): `_piece`
        # the parts of a load whose hold draws kT/C (any one: the draws are unit normals each load's gate scales)
        self._kt_c = next((load.profile.parts for load in loads if Hold.of(load.profile.parts).noise_std_v != 0),
                          first.profile.parts)

    def constants(self, load_keys: Sequence[keys.Key | None], call: int) -> tuple[Constants, torch.Tensor]:
        """The loads' stacked constants and k0 (one load's as they are; several with a leading [S]), each
        load's reloaded for this call when time-multiplexed (`TiledMatrix.stacked`)."""
        first = self.loads[0]
        if not first.multiplexed and len(self.loads) == 1:
            return first.stacked()
        if not first.multiplexed and self._constants is not None:
            return self._constants
        each = [load.stacked(key.fold(keys.Stream.RELOAD, call) if load.multiplexed and key is not None else None)
                for load, key in zip(self.loads, load_keys)]
        if len(each) == 1:
            return each[0]
        stacked = stack_loads([c for c, _ in each]), torch.stack([k0 for _, k0 in each])
        if not first.multiplexed:
            self._constants = stacked
        return stacked

    def _hold(self, passes: int, at: tuple, rows: int) -> tuple[torch.Tensor, ...] | None:
        """The hold's (gate, keep, shift) on analog partial sums (`hold_gates`): one load's [cols, M] where every
        load's are the same (a chip's seeds), else each row's load's [S G, cols, M] (a population's kT/C,
        leakage or injection differ); None where no load's hold acts. Decided once per stack."""
        if (passes, at) not in self._holds:
            for load in self.loads:
                if (passes, at) not in load._gates:  # kept per load
                    wave = load.modules if load.multiplexed else None
                    load._gates[passes, at] = hold_gates(load.profile.parts, load.grid, load.tile_size,
                                                         load.weight.shape[0], wave, passes, *at)
            each = [load._gates[passes, at] for load in self.loads]
            first = each[0]
            if all(g is None for g in each) or all(g is not None and all(torch.equal(a, b) for a, b in zip(g, first))
                                                   for g in each):
                self._holds[passes, at] = first
            else:  # [S, cols, M] each; a load whose hold does not act: no noise, keeps all, no shift
                like = next(g for g in each if g is not None)
                none = (torch.zeros_like(like[0]), torch.ones_like(like[1]), torch.zeros_like(like[2]))
                self._holds[passes, at] = tuple(torch.stack([(g if g is not None else none)[j] for g in each])
                                                for j in range(3))
        hold = self._holds[passes, at]
        if hold is None or hold[0].dim() == 2:
            return hold
        if (passes, *at, rows) not in self._holds:
            self._holds[passes, *at, rows] = tuple(h.repeat_interleave(rows // len(self.loads), 0) for h in hold)
        return self._holds[passes, *at, rows]

    def _row_widths(self, t: torch.Tensor) -> torch.Tensor | None:
        """Each row's load's inputs [S G] (t [S G, K] as wide as the widest load), or None where every load is K
        wide (a population's programs that skip different dead input positions differ: class docstring)."""
        each = [load.weight.shape[1] for load in self.loads]
        if max(each) > t.shape[1]:
            raise InputError(f"t has {t.shape[1]} inputs; expected {max(each)}, the widest load's")
        if min(each) == t.shape[1]:
            return None
        if (at := (t.shape[1], t.device, t.shape[0])) not in self._widths:
            self._widths[at] = torch.tensor(each, device=t.device).repeat_interleave(t.shape[0] // len(each))
        return self._widths[at]

    def _piece(self, t: torch.Tensor, passes: int, compile: bool) -> tuple[int, int]:
        """(loads, rows of each) per piece of a product: as many rows as keep one load's temporaries within
        CHUNK_BYTES, as many loads as fit beside them (at least one). Many loads of a few rows each multiply many
        small matrices: a population of 8 A5 points x 2 chips ran at 0.75x its points one by one."""
        first, s = self.loads[0], len(self.loads)
        row = t.element_size() * first.grid[0] * first.grid[1] * passes * first.channels
        step = max(1, CHUNK_BYTES // row)
        return (s if compile else min(s, max(1, CHUNK_BYTES // (row * min(step, t.shape[0] // s))))), step

    def __call__(self, t: torch.Tensor, load_keys: Sequence[keys.Key | None], ids: torch.Tensor, *,
                 partial_sums: str, call: int | torch.Tensor, passes: int, keep_partials: bool = False,
                 compile: bool = False) -> TiledProduct:
        """The product of t [S G, K] (rows s G ... (s + 1) G through load s, drawing from load_keys[s]
        with stream indices ids [S G], in call `call` or, int64 [S G], each row in its own call);
        arguments checked by the caller (`TiledMatrix.__call__`)."""
        first, s = self.loads[0], len(self.loads)
        if isinstance(call, torch.Tensor) and first.multiplexed:
            raise InputError("call is a tensor (a call per row) on time-multiplexed tiles, whose weights are "
                             "written anew for each call; expected one call (an integer) for all rows")
        t = t.to(dtype=first.weight.dtype, device=first.weight.device)
        ids = ids.to(t.device)
        if any(key is None for key in load_keys) and len(self.loads) > 1:
            raise InputError("load_keys has None; a stack of loads draws each load's noise from its own key, "
                             "so expected a Key per load")
        width, step = self._piece(t, passes, compile)
        if width < s:  # consecutive sub-stacks (rows are load-major): each load's pieces as large as alone
            if (width, t.dtype) not in self._parts:
                self._parts[width, t.dtype] = [LoadStack(self.loads[lo:lo + width]) for lo in range(0, s, width)]
            g = t.shape[0] // s  # rows of each load
            outs = [part(t[lo * g:(lo + width) * g], load_keys[lo:lo + width], ids[lo * g:(lo + width) * g],
                         partial_sums=partial_sums, call=call[lo * g:(lo + width) * g] if isinstance(call, torch.Tensor)
                         else call, passes=passes, keep_partials=keep_partials, compile=compile)
                    for lo, part in zip(range(0, s, width), self._parts[width, t.dtype])]
            return replace(outs[0], y=torch.cat([o.y for o in outs]), batch=t.shape[0], input_scale=torch.cat(
                [o.input_scale for o in outs]), adc_clipped=sum(o.adc_clipped for o in outs),
                partials=torch.cat([o.partials for o in outs], -2) if keep_partials else None)
        m = first.weight.shape[0]
        (rows, cols), ts, n = first.grid, first.tile_size, first.channels
        layout, v = first.loops[0].layout(), first.profile.parts
        at = (t.dtype, t.device)
        gates = self._hold(passes, at, t.shape[0]) if partial_sums == "analog" else None
        if first.predistort and at not in self._shapes:  # once per stack and dtype, not per call
            for load in self.loads:  # each load's measured cubics (a population's differ: its light and ADC)
                if load._shapes is None or load._shapes[0] != at:
                    modules = [load.mount.module(i) for i in range(rows * cols)]
                    load._shapes = (at, tile_shapes(load.profile, n, modules, load.input_range, *at))
            self._shapes[at] = shared_shapes([load._shapes[1] for load in self.loads])
        shapes = self._shapes[at] if first.predistort else None
        constants, k0 = self.constants(load_keys, call)
        bases = [load.pass_keys(key, passes) if key is not None else None for load, key in zip(self.loads, load_keys)]
        every = None if bases[0] is None else [b for each in bases for b in each]  # by (load, pass)
        clip, dac_bits, adc_bits = v.injection.clip, v.injection.dac_bits, v.readout.adc_bits
        plan = Plan(first.grid, ts, n, m, passes, layout, partial_sums, clip is not None, dac_bits is not None,
                    adc_bits is not None, first.predistort, keep_partials, s, isinstance(shapes, list))
        shared = {"input_range": first.input_range, "dac": converter(clip, dac_bits),
                  "shapes": tuple(shapes) if isinstance(shapes, list) else shapes, "constants": constants.tensors(),
                  "k0": k0, "gain": first.loops[0].node(0, t)[0]}
        per_row = gates is not None and gates[0].dim() == 3  # a population's holds: each row's load's [S G, cols, M]
        shared.update(zip(("gate", "keep", "shift"), gates if gates is not None and not per_row else (None,) * 3))
        hold = gates if per_row else (None, None, None)  # sliced with the rows, as the ADC steps
        adc = converter(v.readout.range_v, adc_bits)
        adc_step: float | torch.Tensor = adc[2]
        if len(set(self._adc_bits)) > 1:  # a population's ADCs: each row's load's code step, [S G, 1]
            if (*at, t.shape[0]) not in self._steps:
                steps = [converter(v.readout.range_v, b)[2] for b in self._adc_bits]
                self._steps[(*at, t.shape[0])] = torch.tensor(steps, dtype=t.dtype, device=t.device
                                                              ).repeat_interleave(t.shape[0] // s)[:, None]
            adc_step = self._steps[(*at, t.shape[0])]

        def product(t: torch.Tensor, ids: torch.Tensor, call: int | torch.Tensor, adc_step: float | torch.Tensor,
                    widths: torch.Tensor | None, gate: torch.Tensor | None, keep: torch.Tensor | None,
                    shift: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
            streams = counters = draws = None
            rows_hold = {} if gate is None else {name: h.transpose(0, 1)[:, None]  # [cols, 1, R, M]
                                                 for name, h in (("gate", gate), ("keep", keep), ("shift", shift))}
            if layout.draws:  # one stream per load, tile and pass; counters (sample, channel)
                flat = keys.fold_calls(every, keys.Stream.TILE_CALL, call, rows * cols, t.device, s)  # [S K, T]
                # (or, a call per row, [S, G, K, T])
                if isinstance(call, torch.Tensor):  # each row's own: [S, T, K, G, 1]
                    streams = flat.permute(0, 3, 2, 1)[..., None]
                else:
                    streams = flat.view(s, passes, -1).transpose(1, 2)[..., None, None]  # [S, T, K, 1, 1]
                counters = keys.sample_counters(ids, n).view(s, 1, 1, -1, n)
                if s == 1:
                    streams, counters = streams[0], counters[0, 0, 0]
            if gates is not None:  # the loads' kT/C streams and counters
                draws = hold_draws(self._kt_c, every, call, rows * cols, ids, ts, s)
            x = {"t": t, "widths": widths, **shared, **rows_hold, "adc": (adc[0], adc[1], adc_step), "streams": streams,
                 "counters": counters, "hold_draws": draws}
            return run(plan, x, compile)

        group, widths = t.shape[0] // s, self._row_widths(t)
        if compile or group < 2 * step:  # (a compiled graph fuses its passes: one shape, whole)
            y, s_in, clipped, *partials = product(t, ids, call, adc_step, widths, *hold)
        else:  # in pieces of rows whose temporaries stay in a core's cache
            edges = list(range(0, group, step)) + [group]
            pieces = [product(*(_rows(a, lo, hi, s) if isinstance(a, torch.Tensor) else a
                                for a in (t, ids, call, adc_step, widths, *hold)))
                      for lo, hi in zip(edges[:-1], edges[1:])]
            y = torch.cat([p[0].view(s, -1, m) for p in pieces], 1).view(-1, m)
            s_in = torch.cat([p[1].view(s, -1) for p in pieces], 1).view(-1)
            clipped = sum(p[2] for p in pieces)
            partials = ([torch.cat([p[3].unflatten(2, (s, -1)) for p in pieces], 3).flatten(2, 3)]
                        if keep_partials else [])
        dac, adc = first.conversions(partial_sums)
        return TiledProduct(y, first.grid, ts, n, partial_sums, t.shape[0], dac_conversions_per_sample=dac,
                            adc_conversions_per_sample=adc, adc_clipped=int(clipped), input_scale=s_in,
                            partials=(partials[0][:, 0] if passes == 1 else partials[0]) if keep_partials else None)
