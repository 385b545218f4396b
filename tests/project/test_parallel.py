"""`aocsim.parallel.Workers`: spawned workers started ahead of the parts, warmed, shared by several calls."""

from __future__ import annotations

import operator
import os
import sys

import pytest
import torch

from aocsim.parallel import Workers, run_parts


def _where(module: str, seconds: float = 0.0) -> tuple[int, bool, int]:
    """This process, whether `module` is imported here, torch's threads (module-level: parts are pickled)."""
    import time

    time.sleep(seconds)  # long enough for every worker to take a part
    return os.getpid(), module in sys.modules, torch.get_num_threads()


def test_workers_started_first_give_the_same_results_warmed_on_one_thread() -> None:
    """Workers started before the parts exist run them as `run_parts` alone would (each part once, the
    same numbers as on one worker), on one torch thread, after their warm-up; the pool serves several
    calls, and an error in a part reaches the caller as itself, leaving the pool usable."""
    parts = [(i, 7) for i in range(9)]
    alone = sorted(run_parts(operator.mul, parts, 1))
    with Workers(2, warm=__import__, args=("wave",)) as pool:
        assert sorted(run_parts(operator.mul, parts, pool)) == alone
        with pytest.raises(ZeroDivisionError):
            list(run_parts(operator.truediv, [(1, 1), (1, 0), (2, 1), (3, 1)], pool))
        assert sorted(run_parts(operator.mul, parts, pool)) == alone
        spawned = [r for _, r in run_parts(_where, [("wave", 0.3)] * 4, pool) if r[0] != os.getpid()]
        assert pool.pool is not None
    assert pool.pool is None  # closed on leaving the block
    with pytest.raises(RuntimeError, match="closed"):
        list(run_parts(operator.mul, parts, pool))
    assert spawned and all(warmed and threads == 1 for _, warmed, threads in spawned)


@pytest.mark.slow
def test_a_worker_that_has_not_started_takes_no_part_and_a_failed_warm_up_is_not_an_error() -> None:
    """Parts go to the workers that are up: a spawned one still warming up takes none (here this process
    runs them all); a warm-up that raises leaves the worker working (the part that needs it raises)."""
    import time

    with Workers(2, warm=time.sleep, args=(3,)) as pool:
        assert {pid for _, (pid, _, _) in run_parts(_where, [("wave",)] * 4, pool)} == {os.getpid()}
    with Workers(2, warm=operator.truediv, args=(1, 0)) as pool:
        pool.ready[0].result()  # started despite the warm-up's error
        assert sorted(run_parts(operator.mul, [(i, 2) for i in range(4)], pool)) == [(i, 2 * i) for i in range(4)]


def test_a_spawned_worker_ends_when_its_parent_is_killed(tmp_path) -> None:
    """A sweep killed with SIGKILL leaves no worker finishing its point for nobody."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = ("import time\nfrom aocsim.parallel import run_parts\n"
              "for _ in run_parts(time.sleep, [(60,), (60,)], 2):\n    pass\n")
    parent = subprocess.Popen([sys.executable, "-c", script])

    def children() -> list[int]:
        out = []
        for entry in os.listdir("/proc"):
            try:
                stat = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(stat[1]) == parent.pid and stat[0] != "Z":
                out.append(int(entry))
        return out

    deadline = time.monotonic() + 60
    while not (workers := [p for p in children() if "spawn" in open(f"/proc/{p}/cmdline").read()]):
        assert time.monotonic() < deadline, "no spawned worker started"
        time.sleep(0.1)
    time.sleep(1.0)  # its initializer has run: it sleeps in its part
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while any(os.path.exists(f"/proc/{p}") and open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
              for p in workers):
        assert time.monotonic() < deadline, "the spawned worker outlived its killed parent"
        time.sleep(0.1)


def test_a_process_beside_its_spawned_workers_leaves_them_their_cores() -> None:
    """`Workers.alongside`: this process's torch threads cut by the spawned processes' count (at least one),
    then restored: a starting worker holds a core, and threads beyond the free cores wait on each other."""
    before = torch.get_num_threads()
    torch.set_num_threads(4)
    try:
        pool = Workers(1)  # nothing spawned
        with pool.alongside():
            assert torch.get_num_threads() == 4
        for workers, threads in ((3, 2), (8, 1)):  # as pools of 2 and 7 spawned processes count themselves
            pool.workers = workers
            with pool.alongside():
                assert torch.get_num_threads() == threads
            assert torch.get_num_threads() == 4
    finally:
        torch.set_num_threads(before)
