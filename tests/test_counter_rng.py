"""The counter-based Gaussian stream of the compiled loop (aocsim.hardware.counter_rng)."""

from __future__ import annotations

import math

import pytest
import torch
from scipy import stats

from aocsim.hardware.counter_rng import GOLDEN_GAMMA, counters, key_from, normal_pair, splitmix64, stream_base

MASK = (1 << 64) - 1


def _splitmix64_reference(state: int) -> int:
    """SplitMix64's output function in plain Python integers (Steele, Lea & Flood 2014)."""
    z = state & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def test_stream_is_splitmix64() -> None:
    # The first output of SplitMix64 seeded with 0 is 0xE220A8397B1DCDAF.
    first = splitmix64(stream_base(torch.tensor(0), 0) + counters((1,)) * (GOLDEN_GAMMA - (1 << 64)))
    assert int(first) & MASK == 0xE220A8397B1DCDAF
    gen = torch.Generator().manual_seed(0)
    states = torch.randint(-(1 << 63), (1 << 63) - 1, (200,), generator=gen, dtype=torch.int64)
    out = splitmix64(states)
    assert all(int(o) & MASK == _splitmix64_reference(int(s)) for s, o in zip(states, out))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_normals_are_standard_and_independent(dtype: torch.dtype) -> None:
    n = 200_000
    a, b = normal_pair(stream_base(torch.tensor(12345), 0), counters((n,)), dtype)
    assert a.dtype == dtype and bool(torch.isfinite(a).all() & torch.isfinite(b).all())
    for x in (a.double(), b.double()):
        assert abs(float(x.mean())) <= 5 / math.sqrt(n)
        assert abs(float(x.var()) - 1) <= 5 * math.sqrt(2 / n)
        assert stats.kstest(x.numpy(), "norm").pvalue > 1e-4
    # the two normals of one number, and neighbouring numbers, are uncorrelated
    for x, y in ((a, b), (a[:-1], a[1:])):
        assert abs(float((x.double() * y.double()).mean())) <= 5 / math.sqrt(n)


def test_blocks_of_the_stream_line_up_and_keys_differ() -> None:
    key = key_from(torch.Generator().manual_seed(1))
    whole, _ = normal_pair(stream_base(key, 0), counters((2, 6)), torch.float64)
    first, _ = normal_pair(stream_base(key, 0), counters((1, 6)), torch.float64)
    second, _ = normal_pair(stream_base(key, 6), counters((1, 6)), torch.float64)
    assert torch.equal(whole, torch.cat([first, second]))  # step k reads numbers k B N ... (k + 1) B N - 1
    assert torch.equal(key, key_from(torch.Generator().manual_seed(1)))
    assert not torch.equal(key, key_from(torch.Generator().manual_seed(2)))
