"""Independent pieces of work on several CPU cores: one process per core, one torch thread each.

On small machines, processes scale better than torch's intra-op threads for the many small tensor
operations of an iterative solve (a per-token fixed point runs thousands of them). This process
works as one of them; the others are spawned (no fork after torch has started its thread pools).
Each runs torch with one thread, so `workers` processes use `workers` cores (docs/ARCHITECTURE.md,
threads).
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import threading
import time
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence, TypeVar

from aocsim.threads import torch_threads

T = TypeVar("T")


def _start(warm: Callable[..., object] | None, args: tuple[Any, ...], parent: int) -> None:
    """A spawned worker's initializer: torch on one thread, then the caller's warm-up (its imports, its
    models), so that what a cold process does before its first part overlaps the caller's own work."""
    import torch

    torch.set_num_threads(1)
    threading.Thread(target=_end_with, args=(parent,), daemon=True).start()
    if warm is not None:
        try:
            warm(*args)
        except Exception:  # noqa: BLE001 - a part that needs what failed raises it, where the caller sees it
            pass


def _end_with(parent: int) -> None:
    """Ends this worker once its parent is gone (killed, say): it would otherwise finish its part for
    nobody, holding a core."""
    while os.getppid() == parent:  # the creator's pid, passed in: it may die before this starts
        time.sleep(0.5)
    os._exit(1)


def _ready() -> None:
    """Nothing; one per spawned worker, so that the pool starts them all at once (it spawns on submit)."""


class Workers:
    """`workers` cores for `run_parts`: this process and `workers - 1` spawned ones, started now.

    A spawned process takes seconds to start (Python, torch, the caller's modules, `warm(*args)`: what
    a cold process does before its first part). Started first thing, before the caller's serial set-up,
    that start-up overlaps it instead of delaying the first parts. A context manager; `close` waits
    for the processes to end.
    """

    def __init__(self, workers: int, warm: Callable[..., object] | None = None, args: tuple[Any, ...] = ()) -> None:
        self.workers = max(1, workers)
        self.pool: ProcessPoolExecutor | None = None
        self.ready: list[Future[None]] = []
        if self.workers > 1:
            spawn = multiprocessing.get_context("spawn")
            self.pool = ProcessPoolExecutor(max_workers=self.workers - 1, mp_context=spawn, initializer=_start,
                                            initargs=(warm, args, os.getpid()))
            self.ready = [self.pool.submit(_ready) for _ in range(self.workers - 1)]

    @contextmanager
    def alongside(self) -> Iterator[None]:
        """This process's torch threads cut to the cores the spawned processes leave (at least one) while it
        works beside them: they hold a core each from their start, and more threads than free cores wait
        on each other (on 2 cores, the README main job's calibration fixed points took 1.6 s on 2 threads
        beside a starting worker, 0.15 s on one). Restored afterwards."""
        import torch

        with torch_threads(max(1, torch.get_num_threads() - (self.workers - 1))):
            yield

    def close(self, wait: bool = True) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=wait, cancel_futures=True)
            self.pool = None

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        self.close(wait=kind is None)  # an error is raised at once; processes still starting end once started


def run_parts(fn: Callable[..., T], parts: Sequence[tuple[Any, ...]],
              workers: int | Workers) -> Iterator[tuple[int, T]]:
    """Yield (i, fn(*parts[i])) for every part, in order of completion, on `workers` cores.

    This process is one of the workers (it starts at once); the others are spawned processes, started
    here or, given `Workers`, already (its processes are left running for the caller to close). Parts
    are handed out in the order given, each to the next free worker (so list the longest first); a
    spawned worker takes its first part only once it has started, so that a slow start leaves the
    parts to the workers that are up. In this process alone, in order, if workers <= 1 or there is one
    part. Every part runs on one torch thread wherever it runs, so that its numbers do not depend on
    `workers` (torch splits a large reduction by its thread count, and the rounding follows the
    split). `fn` must be importable (a module-level function) and its arguments picklable.
    """
    given = workers if isinstance(workers, Workers) else None
    count = given.workers if given is not None else workers
    if count <= 1 or len(parts) <= 1:
        for i, part in enumerate(parts):
            with torch_threads(1):  # as on a worker: a reduction's rounding depends on the thread count
                result = fn(*part)
            yield i, result
        return
    if given is not None and given.pool is None:
        raise RuntimeError("run_parts: these Workers are closed")
    pool = given if given is not None else Workers(min(count, len(parts)))
    try:
        yield from _shared(fn, parts, pool)
    finally:
        if given is None:
            pool.close()


def _shared(fn: Callable[..., T], parts: Sequence[tuple[Any, ...]], pool: Workers) -> Iterator[tuple[int, T]]:
    """`run_parts` on this process and the spawned processes of `pool`."""
    executor = pool.pool
    assert executor is not None  # an open pool of spawned workers (run_parts)
    todo = deque(range(len(parts)))
    lock = threading.Lock()
    finished: queue.Queue[tuple[int, Any, BaseException | None]] = queue.Queue()

    def take() -> int | None:
        with lock:
            return todo.popleft() if todo else None

    def feed(ready: Future[None]) -> None:  # keeps one part in flight on one spawned worker
        try:
            ready.result()  # started (a pool that cannot start raises here, and below)
        except BaseException:  # noqa: BLE001 - the next submit raises it again, with the part it failed
            pass
        while (i := take()) is not None:
            try:
                finished.put((i, executor.submit(fn, *parts[i]).result(), None))
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

    outstanding = len(parts)
    feeders = [threading.Thread(target=feed, args=(ready,), daemon=True) for ready in pool.ready[:len(parts) - 1]]
    for feeder in feeders:
        feeder.start()
    try:
        with torch_threads(1):  # this process is one worker among `workers`
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
