"""Shared fixtures. Tests never seed global RNGs: they build explicit generators."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import torch

# Tests compute what they place: a calibration store (aocsim/disk_memo.py) left by an earlier run, or
# by the user's own runs, would hide a fit's cost and its faults. Tests of the store point it at a
# folder of their own (monkeypatch.setenv); spawned workers and notebook kernels inherit this.
os.environ["AOCSIM_CACHE_DIR"] = "off"
# Compiled graphs are kept, though (a kernel store, aocsim/disk_memo.py, keyed by the code that traced
# them): each takes seconds to build, and the workers of one run share them.
_USER = os.getuid() if hasattr(os, "getuid") else os.environ.get("USERNAME", "user")  # (no passwd entry needed)
os.environ.setdefault("AOCSIM_KERNEL_DIR", str(Path(tempfile.gettempdir()) / f"aocsim-test-kernels-{_USER}"))

# pytest -n N: each worker gets its share of the cores. torch's default (every core per process)
# oversubscribes them, and on a 2-core machine one test went from 14 s to 212 s that way.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // _WORKERS))


@pytest.fixture
def one_torch_thread():
    """Bit-for-bit comparisons on one torch thread, as compare's parts run: with more, a product's rounding
    follows the split of its reduction, which differs between batch shapes."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


def contractive_linear(n: int, lipschitz: float, gen: torch.Generator, *, cond: float = 1.0,
                       symmetric: bool = False) -> torch.Tensor:
    """Random A [n, n] with ||A||_2 = lipschitz; singular values spread over `cond`.

    symmetric=True gives eigenvalues equal to the singular values, so plain
    iteration contracts only by `lipschitz` per step along the slowest direction.
    """
    q1, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    q2 = q1 if symmetric else torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))[0]
    s = torch.logspace(0, -torch.log10(torch.tensor(cond)).item(), n, dtype=torch.float64)
    return lipschitz * (q1 * s) @ q2.T


@pytest.fixture(scope="session")
def parity_words():
    """parity-implicit, 24 parity word problems of 16 tokens and the calibration inputs of 16 others (a
    placed model's runs on them: tests/solve/test_row_solve.py, tests/execute/test_ssm_rows.py)."""
    from aocsim import load_model
    from aocsim.execute.ssm_device import calibration_inputs
    from aocsim.tasks.groups import group, word_problems

    model = load_model("parity-implicit")
    tokens, _ = word_problems(group("parity"), 24, 16, identity_prob=0.5, generator=3)
    cal_tokens, _ = word_problems(group("parity"), 16, 16, identity_prob=0.5, generator=99)
    return model, tokens, calibration_inputs(model, cal_tokens)
