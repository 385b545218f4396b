"""How many threads torch uses: fewer than its default where the machine is busy.

torch starts one thread per core. On a small machine where other work already
holds some cores, those threads wait on each other: on 2 cores with one busy,
`aocsim train digits-deq48` took 330 s with torch's default and 20 s with one
thread. The CLI therefore uses the cores that other work leaves free unless
told otherwise (`--threads N`, or OMP_NUM_THREADS set in the environment).

"Other work" is measured now, not averaged: the kernel's CPU counters over a
tenth of a second (Linux). The one-minute load average, the fallback elsewhere,
still counts a job that ended seconds ago: right after a training run it said
1 of 2 cores was busy on an idle machine, and an evaluation that would have
taken 63 s on two worker processes took 154 s on one.

Inside the library torch's count is the caller's, except where fewer threads are
faster: an eager optical loop with a small state iterates on one
(`one_thread_below`).
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from typing import Iterator


def usable_cores() -> int:
    """CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


SAMPLE_S = 0.1  # how long the CPU counters are watched


def _cpu_counters() -> tuple[int, int] | None:
    """(idle, total) jiffies summed over the CPUs this process may run on (/proc/stat), or None."""
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    idle = total = 0
    try:
        with open("/proc/stat") as f:
            for line in f:
                name, *values = line.split()
                if not name.startswith("cpu") or name == "cpu":
                    continue
                if allowed is not None and int(name[3:]) not in allowed:
                    continue
                fields = [int(v) for v in values]
                idle += fields[3] + fields[4]  # idle + iowait
                total += sum(fields[:8])  # user .. steal
    except (OSError, ValueError, IndexError):
        return None
    return (idle, total) if total > 0 else None


def load_average() -> float | None:
    """Cores busy with other work now, among those this process may use: the CPU counters over
    `SAMPLE_S` (this process sleeps meanwhile), else the one-minute load average, else None."""
    before = _cpu_counters()
    if before is not None:
        time.sleep(SAMPLE_S)
        after = _cpu_counters()
        if after is not None and after[1] > before[1]:
            idle = (after[0] - before[0]) / (after[1] - before[1])
            return max(0.0, 1.0 - idle) * usable_cores()
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def choose_threads(requested: int | None, default: int) -> tuple[int, str | None]:
    """(threads, note): the thread count to use and a one-line note when the machine is oversubscribed.

    Args:
        requested: threads asked for (--threads), or None for automatic.
        default: torch's current thread count (its default or OMP_NUM_THREADS).
    """
    cores, load = usable_cores(), load_average()
    if requested is not None:
        busy = 0.0 if load is None else load
        if requested + busy > cores + 0.5:
            return requested, (f"note: {requested} thread(s) with {busy:.1f} of {cores} CPU core(s) busy: "
                               "the machine is oversubscribed; fewer threads may be faster")
        return requested, None
    if load is None or "OMP_NUM_THREADS" in os.environ:
        return default, None
    free = max(1, cores - round(load))
    if free >= default:
        return default, None
    return free, (f"note: {load:.1f} of {cores} CPU core(s) busy; torch uses {free} thread(s) instead "
                  f"of {default} (--threads N to choose)")


# A state of fewer values than this iterates faster on one torch thread than on several: torch's
# transcendental kernels (log, sqrt, sin, cos, exp2) split between threads from 2,048 values, and at a few
# thousand the fork and join cost more than the split saves. Timed on the noisy 48-channel loop on a 2-core
# Xeon (docs/GUIDE.md, the `aocsim bench loop` figures): one thread is 12 % faster at batch 64 and 8 % at
# 128, even at 256 (12,288 values), and 1.5x slower at 1024.
ONE_THREAD_BELOW = 12_288


@contextmanager
def torch_threads(count: int) -> Iterator[int]:
    """torch on `count` threads inside; torch's count as it was afterwards, also after an error."""
    import torch  # (here: the command line reads this module without starting torch)

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield count
    finally:
        torch.set_num_threads(before)


@contextmanager
def one_thread_below(values: int, *, fused: bool = False) -> Iterator[None]:
    """At most one torch thread inside where an eager loop's state holds fewer than `ONE_THREAD_BELOW`
    values; torch's thread count as it was outside, and inside otherwise. `fused`: a compiled loop, whose
    kernels fuse the passes and split no transcendental call (one thread was 4 % slower at batch 64), keeps
    torch's count. A run's bits depend on its batch only (the choice is the batch's)."""
    import torch

    if fused or values >= ONE_THREAD_BELOW or torch.get_num_threads() == 1:
        yield
        return
    with torch_threads(1):
        yield
