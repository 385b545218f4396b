"""Independent pieces of work on several CPU cores: one process per core, one torch thread each.

On small machines, processes scale better than torch's intra-op threads for the many small tensor
operations of an iterative solve (a per-token fixed point runs thousands of them). Workers are
spawned (no fork after torch has started its thread pools) and set torch to one thread each, so
`workers` processes use `workers` cores (docs/ARCHITECTURE.md, threads).
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Callable, Iterator, Sequence, TypeVar

T = TypeVar("T")


def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def run_parts(fn: Callable[..., T], parts: Sequence[tuple[Any, ...]], workers: int) -> Iterator[tuple[int, T]]:
    """Yield (i, fn(*parts[i])) for every part, in order of completion, from `workers` spawned processes
    (in this process, in order, if workers <= 1 or there is one part).

    `fn` must be importable (a module-level function) and its arguments picklable.
    """
    if workers <= 1 or len(parts) <= 1:
        for i, part in enumerate(parts):
            yield i, fn(*part)
        return
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(workers, len(parts)), mp_context=context,
                             initializer=_one_thread) as pool:
        futures = {pool.submit(fn, *part): i for i, part in enumerate(parts)}
        for future in as_completed(futures):
            yield futures[future], future.result()


def split_rows(n: int, parts: int) -> list[slice]:
    """`parts` contiguous slices covering range(n), sizes differing by at most one (no empty slice)."""
    parts = max(1, min(parts, n))
    base, extra = divmod(n, parts)
    out, start = [], 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        out.append(slice(start, stop))
        start = stop
    return out
