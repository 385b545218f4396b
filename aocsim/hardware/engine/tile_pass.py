"""The body of a tile product as one tensor function (`tile_pass`), run eagerly or compiled (`run`).

`TiledMatrix.__call__` prepares a product (argument checks, the keys folded into int64 tensors, the
stacked constants, the gain, the counters, the hold's gate, keep and shift, the converters' ranges) and runs
this body: the encoding (input scale, predistortion, DAC), the stacked tiles' optical stage
(`step.optical`), the partials, their analog sum (`partial_sums.held_sum`), the ADC, the mean over the
averaged passes, times s_in. With compile=True the same function is traced (make_fx) and compiled by
Inductor (`backends.graph`), once per process for each `Plan` and the inputs' structure, shapes, dtypes
and device. Every number that can differ between chips, seeds, loads or calls (keys, counters, constants,
k0, gain, gate, keep and shift, the input range, the converters' ranges and steps, the emitters' cubics) is an
input of the graph, never a constant of it: a graph compiled for one chip gives another chip's numbers.
Numbers (floats) run as they are eagerly and as float64 0-dim tensors compiled (the same bits eagerly:
a 0-dim tensor is cast to the computation's dtype as a number is).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from aocsim.hardware.engine import backends
from aocsim.hardware.engine.emitter_calibration import predistorted_tiles
from aocsim.hardware.engine.partial_sums import held_sum
from aocsim.hardware.engine.scalars import scalars
from aocsim.hardware.engine.step import Constants, Layout, node_drive, optical
from aocsim.hardware.physics import components as C


@dataclass(frozen=True)
class Plan:
    """What a product's body does, fixed in a compiled graph (every number is an input, `run`).

    grid (rows, cols), tile_size, channels, outputs M; passes: averaged passes; layout: the optical
    stage's; partial_sums; clip, dac, adc: whether the DAC clips, the DAC quantises and the ADC
    quantises; predistort; keep_partials: whether the partials are returned too; loads: weight loads
    of the same program stacked (`tile_product.LoadStack`), each on its own group of the rows;
    shapes_per_load: `shapes` is a tuple of each load's (a population's points measure their emitters
    with their own light and ADC).
    """

    grid: tuple[int, int]
    tile_size: int
    channels: int
    outputs: int
    passes: int
    layout: Layout
    partial_sums: str
    clip: bool
    dac: bool
    adc: bool
    predistort: bool
    keep_partials: bool = False
    loads: int = 1
    shapes_per_load: bool = False  # a population's loads predistort with each its own measured cubics


def input_scale(t: torch.Tensor, input_range: Any) -> torch.Tensor:
    """s_in [B] = max_k |t[b, k]| / r: the drive t / s_in spans [-r, r] (s_in = 1 for an all-zero sample)."""
    s_in = t.abs().amax(dim=1) / input_range
    return torch.where(s_in > 0, s_in, torch.ones_like(s_in))


def dac(plan: Plan, u: torch.Tensor, converter: tuple[Any, Any, Any]) -> torch.Tensor:
    """The emitter drive clipped to the DAC's range (low, high) and on its grid (step): `OpticalLoop.injection`."""
    if not plan.clip:
        return u
    low, high, step = converter
    return C.dac(u, low, high, step if plan.dac else None)


def tile_pass(plan: Plan, x: dict[str, Any]) -> tuple[torch.Tensor, ...]:
    """(y [B, M], s_in [B], ADC inputs out of range (int64 0-dim)[, partials [cols, K, B, M]]) of a product.

    x: t [B, K]; widths: each row's load's own inputs [B] where a stack's programs differ in width (the
    columns beyond a row's width are not driven: zero drive, as a narrower load's tile padding; None where
    every row's load is K wide); input_range; dac and adc (low, high, step); shapes (the emitters' cubics to
    predistort with, `emitter_calibration.tile_shapes`; None without); constants (`Constants.tensors()` of the
    stacked tiles), k0, gain; streams [T, K, 1, 1] and counters [B, N] (None without draws); gate,
    keep and shift [cols, M] (None without a hold acting), hold_draws (streams and counters of kT/C, or None).
    With S = `plan.loads` > 1 the rows are S groups of G, group s through load s: constants, k0 and
    streams carry a leading [S], counters are [S, 1, 1, G, N] and the kT/C streams [T, K, S, 1, 1]
    with counters [S, G, tile_size]. With a call per row (rows on their own tokens) the streams' row
    dim is the rows': [T, K, B, 1] ([S, T, K, G, 1]) and kT/C [T, K, B, 1] ([T, K, S, G, 1]).
    """
    t = x["t"]
    (rows, cols), ts, n, m = plan.grid, plan.tile_size, plan.channels, plan.outputs
    batch, k = t.shape
    s_in = input_scale(t, x["input_range"])
    drive = t / s_in[:, None]
    widths = x.get("widths")
    if plan.predistort:
        def tiles_of(d: torch.Tensor, shapes: Any, w: torch.Tensor | None) -> torch.Tensor:
            return predistorted_tiles(d, cols, ts, n, rows * cols, lambda v: dac(plan, v, x["dac"]), shapes, widths=w)

        if plan.shapes_per_load:  # group s through load s's cubics
            group = batch // plan.loads
            u = torch.cat([tiles_of(drive[s * group:(s + 1) * group], shapes,
                                    None if widths is None else widths[s * group:(s + 1) * group])
                           for s, shapes in enumerate(x["shapes"])], 1)
        else:
            u = tiles_of(drive, x["shapes"], widths)
    else:
        converted = dac(plan, drive, x["dac"])
        if widths is not None:  # a narrower load's columns past its width: undriven, as its tile padding
            converted = torch.where(torch.arange(k, device=t.device) < widths[:, None], converted,
                                    torch.zeros((), dtype=converted.dtype, device=t.device))
        blocks = F.pad(converted, (0, cols * ts - k)).view(batch, cols, ts)
        u = F.pad(blocks, (0, n - ts)).transpose(0, 1)[torch.arange(rows * cols, device=t.device) % cols]
    constants = Constants.from_tensors(x["constants"])
    drive = node_drive(x["k0"], constants, x["gain"], plan.layout)
    if plan.loads == 1:
        node = optical(u[:, None], constants, drive, plan.layout, x["streams"], x["counters"])
    else:  # [S, T, 1, G, N]: load s's tiles on its group of G rows, constants and streams [S, T, ...]
        grouped = u.unflatten(1, (plan.loads, -1)).transpose(0, 1)[:, :, None]
        node = optical(grouped, constants, drive, plan.layout, x["streams"], x["counters"])
        node = node.permute(1, 2, 0, 3, 4).flatten(2, 3)  # [T, K, S G, N]: the rows in their order
    node = node[..., :ts].reshape(rows, cols, node.shape[1], batch, ts)
    partials = node.permute(1, 2, 3, 0, 4).reshape(cols, -1, batch, rows * ts)[..., :m]  # [cols, K, B, M] volts
    if plan.partial_sums == "digital":
        adc_in = partials
    elif x["gate"] is None:  # no hold acts: the cols partials added
        adc_in = partials.sum(0)
    else:
        adc_in = held_sum(partials, x["gate"], x["keep"], x["shift"], x["hold_draws"], rows, ts, plan.passes)
    low, high, step = x["adc"]
    if plan.adc:
        clipped = ((adc_in < low) | (adc_in > high)).sum()
        reading = C.quantize_step(adc_in, low, high, step)
    else:
        clipped, reading = torch.zeros((), dtype=torch.int64, device=t.device), adc_in
    summed = reading if plan.partial_sums == "analog" else reading.sum(0)  # [K, B, M]
    y = (summed[0] if summed.shape[0] == 1 else summed.mean(0)) * s_in[:, None]
    return (y, s_in, clipped, partials) if plan.keep_partials else (y, s_in, clipped)


def _flatten(value: Any, leaves: list[Any]) -> Any:
    """The structure of `value` (tensors, numbers, None and tuples of them), its leaves appended to `leaves`:
    "t" a tensor's place, "n" a number's, None an absent input's (cheap to hash, unlike a pytree spec)."""
    if isinstance(value, tuple):
        return tuple(_flatten(v, leaves) for v in value)
    if value is None:
        return None
    leaves.append(value)
    return "t" if isinstance(value, torch.Tensor) else "n"


def _unflatten(structure: Any, leaves: Any) -> Any:
    if isinstance(structure, tuple):
        return tuple(_unflatten(s, leaves) for s in structure)
    return None if structure is None else next(leaves)


def run(plan: Plan, x: dict[str, Any], compile: bool = False) -> tuple[torch.Tensor, ...]:
    """`tile_pass(plan, x)`, eagerly or through its compiled graph (module docstring; needs a C++ compiler:
    without one, one `AocsimError`)."""
    if not compile:
        return tile_pass(plan, x)
    leaves: list[Any] = []
    structure = tuple((name, _flatten(value, leaves)) for name, value in x.items())
    device = x["t"].device
    args = tuple(a if isinstance(a, torch.Tensor) else scalars((float(a),), torch.float64, device)[0]
                 for a in leaves)  # numbers as graph inputs, made once per process

    def body(*flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
        given = iter(flat)
        return tile_pass(plan, {name: _unflatten(s, given) for name, s in structure})

    graph_key = ("tile pass", plan, structure)  # the arguments' shapes, strides, dtypes: `backends.graph`
    return tuple(backends.graph(graph_key, body, args, "the tile product", "the same product")(*args))
