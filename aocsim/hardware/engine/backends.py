"""Execution backends of the one iteration (`aocsim.hardware.engine.step.iteration`).

- eager: calls `iteration` directly (autograd works through it);
- compiled (`OpticalLoop(..., compile=True)`): `iteration`, or a block of
  `steps` unrolled iterations, traced with make_fx and compiled by Inductor
  into vectorised C++ loops around the matrix product, so the nonlinearity,
  the LED cubics, the noise draws and the node update fuse into few passes.
  Calling the compiled graph directly skips dynamo's guards (~20 us per call).

Both run the same function on the same inputs, draws included (the keyed
stream is computed inside the step), so they agree to float rounding. A graph
depends only on the layout, shapes, dtype, device and block length; every
number is an input, so one graph serves every loop of that layout. `graph`
compiles and keeps them, the loop's and the tile product's
(`aocsim.hardware.engine.tile_pass`). Compiling
needs a C++ compiler and takes seconds per layout, so it is opt-in; Inductor
keeps what it compiled on disk, and a later process reads it back (`_compile`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Callable

import torch

from aocsim.errors import AocsimError
from aocsim.hardware.engine.step import NODE_PARAMS, Constants, Layout, iteration

_GRAPHS: dict[tuple, Callable[..., object]] = {}


def _block(steps: int, layout: Layout) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """`steps` iterations with one node vector (constant schedules), as a flat-argument function."""
    def run(z, z_prev, base, key, counters, *rest):
        node, c = rest[:NODE_PARAMS], Constants.from_tensors(rest[NODE_PARAMS:])
        for _ in range(steps):  # keys advance per iteration only with draws, where steps == 1
            z, z_prev = iteration(z, z_prev, base, c, node, key, counters, layout), z
        return z, z_prev
    return run


def _cacheable(args: tuple[torch.Tensor, ...]) -> tuple[contextlib.AbstractContextManager, list]:
    """(context, example inputs) under which Inductor uses its disk cache (its FX graph cache, shared by
    processes): a tracing context with a shape environment, which a make_fx trace has none of (without one,
    every process compiled every graph anew: parity-implicit's seven graphs, 20 s), and the inputs as fake
    tensors of static shapes (else the shape environment makes the kernels dynamic-shaped: slower to
    compile, no faster). A torch without this private API compiles without the cache."""
    try:
        from torch._guards import TracingContext, tracing
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        fake = FakeTensorMode(shape_env=ShapeEnv())
        return tracing(TracingContext(fake)), [fake.from_tensor(a, static_shapes=True) for a in args]
    except (ImportError, AttributeError, TypeError):
        return contextlib.nullcontext(), list(args)


def _compile(fn: Callable[..., object], args: tuple[torch.Tensor, ...]) -> Callable[..., object]:
    """`fn` traced with make_fx and compiled by Inductor, read back from its disk cache where a process
    compiled it before (`_cacheable`)."""
    from torch._inductor import compile as inductor_compile
    from torch.fx.experimental.proxy_tensor import make_fx

    with torch.no_grad():
        traced = make_fx(lambda *flat: fn(*flat))(*args)  # (a signature's annotations, strings under
        # postponed evaluation, would become globals of the graph that its cache key cannot name)
        context, examples = _cacheable(args)
        with context:
            return inductor_compile(traced, examples)


def graph(graph_key: tuple, fn: Callable[..., object], args: tuple[torch.Tensor, ...], what: str,
          eager: str) -> Callable[..., object]:
    """`fn` traced on `args` and compiled, once per process for `graph_key` (everything the trace bakes in:
    what `fn` is, the layout, the shapes, dtypes and devices of `args`). A missing toolchain becomes one
    `AocsimError` naming what is compiled (`what`) and what runs it eagerly instead (`eager`)."""
    if graph_key not in _GRAPHS:
        try:
            _GRAPHS[graph_key] = _compile(fn, args)
        except Exception as exc:  # Inductor raises many types (missing compiler, codegen failure)
            first = str(exc).splitlines()[0] if str(exc) else ""
            raise AocsimError(f"compile=True: could not compile {what} ({type(exc).__name__}: {first}); "
                              f"it needs a C++ compiler; compile=False runs {eager} eagerly") from exc
    return _GRAPHS[graph_key]


def eager(z: torch.Tensor, z_prev: torch.Tensor, base: torch.Tensor, c: Constants, node: tuple[torch.Tensor, ...],
          key: torch.Tensor | None, counters: torch.Tensor | None, layout: Layout) -> torch.Tensor:
    """One iteration, eagerly."""
    return iteration(z, z_prev, base, c, node, key, counters, layout)


def compiled(z: torch.Tensor, z_prev: torch.Tensor, base: torch.Tensor, c: Constants, node: tuple[torch.Tensor, ...],
             key: torch.Tensor | None, counters: torch.Tensor | None, layout: Layout, steps: int = 1
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """`steps` iterations through the compiled graph (compiled on first use of a layout).

    Returns (z[k + steps], z[k + steps - 1]). A missing toolchain becomes one `AocsimError`.
    """
    layout = dataclasses.replace(layout, led_folded=False)  # fused elementwise work: fewer flops wins
    if layout.draws and steps != 1:
        raise AocsimError("internal: noisy iterations run one per compiled call (each has its own key)")
    if key is None:  # placeholders keep one argument list (the graph ignores them)
        key = torch.zeros((), dtype=torch.int64, device=z.device)
        counters = torch.zeros((1, 1), dtype=torch.int64, device=z.device)
    args = (z, z_prev, base, key, counters, *node, *c.tensors())
    graph_key = ("loop", layout, steps, z.shape, z.dtype, z.device, base.shape, counters.shape)
    out = graph(graph_key, _block(steps, layout), args, "the loop step", "the same loop")(*args)
    return out[0], out[1]
