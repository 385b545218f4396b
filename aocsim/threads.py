"""How many threads torch uses: fewer than its default where the machine is busy.

torch starts one thread per core. On a small machine where other work already
holds some cores, those threads wait on each other: on 2 cores with one busy,
`aocsim train digits-deq48` took 330 s with torch's default and 20 s with one
thread. The CLI therefore uses the cores the load average leaves free unless
told otherwise (`--threads N`, or OMP_NUM_THREADS set in the environment).
"""

from __future__ import annotations

import os


def usable_cores() -> int:
    """CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def load_average() -> float | None:
    """One-minute load average (runnable processes), or None where the system has none."""
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
            return requested, (f"note: {requested} thread(s) with load average {busy:.1f} on {cores} CPU core(s): "
                               "the machine is oversubscribed; fewer threads may be faster")
        return requested, None
    if load is None or "OMP_NUM_THREADS" in os.environ:
        return default, None
    free = max(1, cores - round(load))
    if free >= default:
        return default, None
    return free, (f"note: load average {load:.1f} on {cores} CPU core(s); torch uses {free} thread(s) instead "
                  f"of {default} (--threads N to choose)")
