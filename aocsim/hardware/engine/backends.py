"""Execution backends of the one iteration (`aocsim.hardware.engine.step.iteration`).

- eager: the callers call `iteration` directly (autograd works through it);
- compiled (`OpticalLoop(..., compile=True)`): `iteration`, or a block of
  `steps` unrolled iterations, exported and compiled ahead of time by
  AOTInductor into vectorised C++ loops around the matrix product, so the nonlinearity,
  the LED cubics, the noise draws and the node update fuse into few passes.
  Calling the compiled graph directly skips dynamo's guards (~20 us per call).

Both run the same function on the same inputs, draws included (the keyed
stream is computed inside the step), so they agree to float rounding. A graph
depends only on the layout, shapes, dtype, device and block length; every
number is an input, so one graph serves every loop of that layout. `graph`
compiles and keeps them, the loop's and the tile product's
(`aocsim.hardware.engine.tile_pass`). Compiling
needs a C++ compiler and takes seconds per graph, so it is opt-in; the kernel
store keeps what was compiled, and a later process loads it in milliseconds
(`_compile`; docs/DEVICE_RUNS.md, compiled placements).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
import warnings
from pathlib import Path
from typing import Callable

import torch

from aocsim.errors import AocsimError
from aocsim.hardware.engine.memo import Memo
from aocsim.hardware.engine.step import NODE_PARAMS, Constants, Layout, iteration, node_drive



def _block(steps: int, layout: Layout) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """`steps` iterations with one node vector (constant schedules), as a flat-argument function."""
    def run(z, z_prev, base, key, counters, *rest):
        node, c = rest[:NODE_PARAMS], Constants.from_tensors(rest[NODE_PARAMS:])
        drive = node_drive(base, c, node[0], layout)
        for _ in range(steps):  # keys advance per iteration only with draws, where steps == 1
            z, z_prev = iteration(z, z_prev, drive, c, node, key, counters, layout), z
        return z, z_prev
    return run


def _compile(fn: Callable[..., object], args: tuple[torch.Tensor, ...], graph_key: tuple) -> Callable[..., object]:
    """`fn` compiled ahead of time for `args`' shapes (torch.export, then AOTInductor into a package: a
    shared library and its constants), or its package read back from the kernel store where a process
    built it before (`disk_memo.kernel_path`). A package loads in milliseconds through torch's C++ loader,
    without importing Inductor (seconds): a later process pays nothing for a graph built once."""
    from aocsim import disk_memo

    path = disk_memo.kernel_path(graph_key)
    if path is not None and path.exists():
        try:
            runner = _load(path, args[0].device)
        except Exception:  # noqa: BLE001 - not a whole package (a disk error, another build): built again
            pass
        else:
            with contextlib.suppress(OSError):  # used now (the store forgets the least recently used first),
                os.utime(path)  # where this process may write: a shared, read-only store is read all the same
            return runner
    with tempfile.TemporaryDirectory() as scratch:
        package = _build(fn, args, Path(scratch) / "graph.pt2")
        disk_memo.computed["graph"] += 1
        runner = _load(package, args[0].device)
        if path is not None:
            disk_memo.keep_kernel(package, path)
    return runner


def _build(fn: Callable[..., object], args: tuple[torch.Tensor, ...], package: Path) -> Path:
    import torch._inductor

    class Flat(torch.nn.Module):  # export traces modules; `fn` takes and returns flat tensors
        def forward(self, *flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return tuple(fn(*flat))  # type: ignore[call-overload]

    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", "`isinstance.treespec, LeafSpec", FutureWarning)  # torch's own export
        exported = torch.export.export(Flat(), args, strict=False)
        return Path(torch._inductor.aoti_compile_and_package(exported, package_path=str(package)))


def _load(package: Path, device: torch.device) -> Callable[..., object]:
    """A package's runner: torch's C++ loader where this torch has it, else Inductor's (slower to import)."""
    loader_class = getattr(getattr(torch._C, "_aoti", None), "AOTIModelPackageLoader", None)
    if loader_class is None:
        from torch._inductor import aoti_load_package

        compiled = aoti_load_package(str(package))
        return lambda *flat: compiled(*flat)
    index = -1 if device.type == "cpu" else (torch.cuda.current_device() if device.index is None else device.index)
    loader = loader_class(str(package), "model", False, 1, index)  # one runner; the CPU is device index -1
    return lambda *flat: loader.run(list(flat))


def argument_key(args: tuple[torch.Tensor, ...]) -> tuple:
    """What a trace bakes in of its arguments: each one's shape, strides, dtype and device. A graph built for
    contiguous inputs reads a transposed one's memory in the wrong order (products off by up to 8.75 for
    outputs of 12), so the strides are part of every graph's key, in memory and in the kernel store."""
    return tuple((tuple(a.shape), tuple(a.stride()), str(a.dtype), str(a.device)) for a in args)


# Compiled graphs by what they bake in (`graph`); each also in the kernel store, under the same key.
GRAPHS: Memo[Callable[..., object]] = Memo("graph", 256, hashed=True)  # keys of shapes and layouts


def graph(graph_key: tuple, fn: Callable[..., object], args: tuple[torch.Tensor, ...], what: str,
          eager: str) -> Callable[..., object]:
    """`fn` traced on `args` and compiled, once per process for `graph_key` (what `fn` is, its layout) and
    the arguments as the trace sees them (`argument_key`: derived here from `args`, so no caller can leave
    one out). A missing toolchain becomes one `AocsimError` naming what is compiled (`what`) and what runs
    it eagerly instead (`eager`)."""
    inputs = (graph_key, argument_key(args))

    def build() -> Callable[..., object]:
        try:
            return _compile(fn, args, GRAPHS.key(inputs))
        except Exception as exc:  # Inductor raises many types (missing compiler, codegen failure)
            first = str(exc).splitlines()[0] if str(exc) else ""
            raise AocsimError(f"compile=True: could not compile {what} ({type(exc).__name__}: {first}); "
                              f"it needs a C++ compiler; compile=False runs {eager} eagerly") from exc
    return GRAPHS(inputs, build)


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
    graph_key = ("loop", layout, steps)  # the arguments' shapes, strides, dtypes and devices: `graph`
    out = graph(graph_key, _block(steps, layout), args, "the loop step", "the same loop")(*args)
    return out[0], out[1]
