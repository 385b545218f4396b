"""Independent pieces of work on several CPU cores: one process per core, one torch thread each.

On small machines, processes scale better than torch's intra-op threads for the many small tensor
operations of an iterative solve (a per-token fixed point runs thousands of them). This process
works as one of them; the others are spawned (no fork after torch has started its thread pools).
Each runs torch with one thread, so `workers` processes use `workers` cores (docs/ARCHITECTURE.md,
threads).
"""

from __future__ import annotations

import multiprocessing
import queue
import threading
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable, Iterator, Sequence, TypeVar

T = TypeVar("T")


def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def run_parts(fn: Callable[..., T], parts: Sequence[tuple[Any, ...]], workers: int) -> Iterator[tuple[int, T]]:
    """Yield (i, fn(*parts[i])) for every part, in order of completion, on `workers` cores.

    This process is one of the workers (it starts at once, while the others are spawned and import
    torch); the other `workers - 1` are spawned processes. Parts are handed out in the order given,
    each to the next free worker (so list the longest first). In this process alone, in order, if
    workers <= 1 or there is one part. Every part runs on one torch thread wherever it runs, so that
    its numbers do not depend on `workers` (torch splits a large reduction by its thread count, and
    the rounding follows the split). `fn` must be importable (a module-level function) and its
    arguments picklable.
    """
    import torch

    if workers <= 1 or len(parts) <= 1:
        threads = torch.get_num_threads()
        for i, part in enumerate(parts):
            torch.set_num_threads(1)  # as on a worker: a reduction's rounding depends on the thread count
            try:
                result = fn(*part)
            finally:
                torch.set_num_threads(threads)
            yield i, result
        return

    todo = deque(range(len(parts)))
    lock = threading.Lock()
    finished: queue.Queue[tuple[int, Any, BaseException | None]] = queue.Queue()

    def take() -> int | None:
        with lock:
            return todo.popleft() if todo else None

    def feed(pool: ProcessPoolExecutor) -> None:  # keeps one part in flight on one spawned worker
        while (i := take()) is not None:
            try:
                finished.put((i, pool.submit(fn, *parts[i]).result(), None))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread below
                finished.put((i, None, exc))
                return

    def drain(block: bool) -> Iterator[tuple[int, T]]:
        while True:
            try:
                i, result, exc = finished.get(block=block)
            except queue.Empty:
                return
            if exc is not None:
                with lock:
                    todo.clear()
                raise exc
            yield i, result
            block = False

    spawned = min(workers, len(parts)) - 1
    context = multiprocessing.get_context("spawn")
    threads = torch.get_num_threads()
    outstanding = len(parts)
    with ProcessPoolExecutor(max_workers=spawned, mp_context=context, initializer=_one_thread) as pool:
        feeders = [threading.Thread(target=feed, args=(pool,), daemon=True) for _ in range(spawned)]
        for feeder in feeders:
            feeder.start()
        torch.set_num_threads(1)  # this process is one worker among `workers`
        try:
            while (i := take()) is not None:
                result = fn(*parts[i])
                outstanding -= 1
                yield i, result
                for done in drain(block=False):
                    outstanding -= 1
                    yield done
            while outstanding:
                for done in drain(block=True):
                    outstanding -= 1
                    yield done
        finally:
            torch.set_num_threads(threads)
            with lock:
                todo.clear()
            for feeder in feeders:
                feeder.join()


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
