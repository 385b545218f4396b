"""Progress lines off a terminal, and torch's thread count on busy machines."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from aocsim import progress, threads
from aocsim.cli import main


def test_line_writer_turns_tqdm_updates_into_periodic_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    out = io.StringIO()
    writer = progress.LineWriter(out, interval_s=10.0)
    for t, pct in ((0, 0), (2, 33), (12, 67), (13, 100)):
        clock[0] = 100.0 + t
        writer.write(f"\r{pct:3d}%|bar|")
    writer.write("")
    writer.write("\r100%|bar|")
    writer.write("\n")
    # 0 % at once; 33 % within 10 s of it is dropped; 67 % after 12 s; the final state on the closing newline.
    assert out.getvalue() == "0%|bar|\n67%|bar|\n100%|bar|\n"


def test_train_off_a_terminal_prints_progress_lines(tmp_path: Path) -> None:
    out = CliRunner().invoke(main, ["train", "digits-deq48", "--out", str(tmp_path / "m"), "--epochs", "2"])
    assert out.exit_code == 0, out.output
    assert "\r" not in out.output
    assert any(line.startswith("digits-deq48 epochs: 100%") and "2/2" in line for line in out.output.splitlines())


def test_evaluate_state_tracking_shows_progress(tmp_path: Path) -> None:
    out = CliRunner().invoke(main, ["evaluate", "parity-explicit1", "--batch", "4", "--plot", str(tmp_path / "p.svg")])
    assert out.exit_code == 0, out.output
    assert "\r" not in out.output
    # one piece of work per length (3) and worker process
    assert any(re.match(r"parity-explicit1 solves: 100%\S* (\d+)/\1 ", line) and int(line.split("/")[0].split()[-1]) % 3 == 0
               for line in out.output.splitlines())


@pytest.mark.parametrize(("requested", "load", "omp", "expected", "note"), [
    (None, 1.0, False, 1, "note: 1.0 of 2 CPU core(s) busy; torch uses 1 thread(s) instead of 2"),
    (None, 0.2, False, 2, None),
    (None, 5.0, False, 1, "note: 5.0 of 2 CPU core(s) busy; torch uses 1 thread(s) instead of 2"),
    (None, 1.0, True, 2, None),  # OMP_NUM_THREADS set: the user chose
    (None, None, False, 2, None),  # no load measure on this system
    (2, 1.0, False, 2, "note: 2 thread(s) with 1.0 of 2 CPU core(s) busy: the machine is oversubscribed"),
    (1, 1.0, False, 1, None),
])
def test_thread_choice(monkeypatch: pytest.MonkeyPatch, requested: int | None, load: float | None, omp: bool,
                       expected: int, note: str | None) -> None:
    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    monkeypatch.setattr(threads, "load_average", lambda: load)
    if omp:
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
    else:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    n, text = threads.choose_threads(requested, default=2)
    assert n == expected
    assert (text is None) if note is None else (text is not None and text.startswith(note) and "\n" not in text)


def test_threads_option_reaches_torch_and_is_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(threads, "load_average", lambda: 0.0)
    before = torch.get_num_threads()
    seen = []
    monkeypatch.setattr("aocsim.experiments.bench_loop.bench_loop",
                        lambda *a, **k: seen.append(torch.get_num_threads()) or [])
    out = CliRunner().invoke(main, ["--threads", "1", "bench", "loop", "--no-compiled"])
    assert out.exit_code == 0, out.output
    assert seen == [1] and "1 torch thread(s)" in out.output and "one_thread_below" not in out.output
    assert torch.get_num_threads() == before
    out = CliRunner().invoke(main, ["--threads", "2", "bench", "loop", "--no-compiled"])  # the rule said
    assert out.exit_code == 0, out.output
    assert "2 torch thread(s) (an eager loop with fewer than 12,288 state values on one" in out.output


def test_busy_cores_are_measured_now_from_the_cpu_counters(monkeypatch: pytest.MonkeyPatch) -> None:
    """Half the CPU time idle over the sample = half the cores busy; without counters, the load average."""
    readings = iter([(100, 200), (150, 300)])
    monkeypatch.setattr(threads, "_cpu_counters", lambda: next(readings))
    monkeypatch.setattr(threads, "SAMPLE_S", 0.0)
    monkeypatch.setattr(threads, "usable_cores", lambda: 4)
    assert threads.load_average() == pytest.approx(2.0)
    monkeypatch.setattr(threads, "_cpu_counters", lambda: None)
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (0.7, 0.5, 0.3))
    assert threads.load_average() == 0.7
    counters = threads.__dict__["_cpu_counters"]
    assert counters() is None  # patched; the real reader parses this system's /proc/stat:
    monkeypatch.undo()
    real = threads._cpu_counters()
    assert real is None or (0 <= real[0] <= real[1])


def test_a_small_loop_state_iterates_on_one_thread_with_the_same_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """An eager loop whose state holds fewer than ONE_THREAD_BELOW values iterates (`iterate`, `solve`) on
    one thread, a larger one on torch's count; the count is restored, also after an error; and one thread
    gives the bits of two, at a batch whose transcendental calls two threads split (64 x 48 values)."""
    import torch

    from aocsim.hardware.engine.loop import OpticalLoop

    before, seen = torch.get_num_threads(), []

    def alpha(k: int) -> float:  # a schedule: read at every iteration, inside the run
        seen.append(torch.get_num_threads())
        return 0.5

    weight = torch.randn(48, 48, generator=torch.Generator().manual_seed(0))
    loop = OpticalLoop("aoc48", weight, alpha=alpha, beta=18.6, generator=1)
    small, large = 64, threads.ONE_THREAD_BELOW // 48
    x = torch.rand(large, 48, generator=torch.Generator().manual_seed(1))
    torch.set_num_threads(2)
    try:
        z = loop.iterate(torch.zeros(small, 48), x[:small], 3, generator=2)
        solved = loop.solve(x[:small], generator=3, max_iter=16)
        assert set(seen) == {1} and torch.get_num_threads() == 2
        seen.clear()
        loop.iterate(torch.zeros(large, 48), x, 2, generator=2)
        assert set(seen) == {2}
        with pytest.raises(RuntimeError), threads.one_thread_below(small * 48):
            raise RuntimeError("inside")
        assert torch.get_num_threads() == 2
        with threads.one_thread_below(small * 48, fused=True):  # a compiled loop's fused kernels: torch's count
            assert torch.get_num_threads() == 2
        monkeypatch.setattr(threads, "ONE_THREAD_BELOW", 0)  # no state is small: two threads throughout
        seen.clear()
        assert torch.equal(loop.iterate(torch.zeros(small, 48), x[:small], 3, generator=2), z)
        assert torch.equal(loop.solve(x[:small], generator=3, max_iter=16).z, solved.z)
        assert set(seen) == {2}
    finally:
        torch.set_num_threads(before)
