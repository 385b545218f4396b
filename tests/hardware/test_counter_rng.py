"""The counter-based Gaussian stream of the compiled loop (aocsim.hardware.engine.counter_rng)."""

from __future__ import annotations

import math

import pytest
import torch
from scipy import stats

from aocsim.hardware.engine.counter_rng import GOLDEN_GAMMA, normal_pair, splitmix64
from aocsim.hardware.engine.keys import Key, sample_counters


def counters(n: int) -> torch.Tensor:
    return torch.arange(1, n + 1, dtype=torch.int64)

MASK = (1 << 64) - 1


def _splitmix64_reference(state: int) -> int:
    """SplitMix64's output function in plain Python integers (Steele, Lea & Flood 2014)."""
    z = state & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def test_stream_is_splitmix64() -> None:
    # The first output of SplitMix64 seeded with 0 is 0xE220A8397B1DCDAF.
    first = splitmix64(torch.tensor(0) + counters(1) * (GOLDEN_GAMMA - (1 << 64)))
    assert int(first) & MASK == 0xE220A8397B1DCDAF
    gen = torch.Generator().manual_seed(0)
    states = torch.randint(-(1 << 63), (1 << 63) - 1, (200,), generator=gen, dtype=torch.int64)
    out = splitmix64(states)
    assert all(int(o) & MASK == _splitmix64_reference(int(s)) for s, o in zip(states, out))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_normals_are_standard_and_independent(dtype: torch.dtype) -> None:
    n = 200_000
    a, b = normal_pair(torch.tensor(12345), counters(n), dtype)
    assert a.dtype == dtype and bool(torch.isfinite(a).all() & torch.isfinite(b).all())
    for x in (a.double(), b.double()):
        assert abs(float(x.mean())) <= 5 / math.sqrt(n)
        assert abs(float(x.var()) - 1) <= 5 * math.sqrt(2 / n)
        assert stats.kstest(x.numpy(), "norm").pvalue > 1e-4
    # the two normals of one number, and neighbouring numbers, are uncorrelated
    for x, y in ((a, b), (a[:-1], a[1:])):
        assert abs(float((x.double() * y.double()).mean())) <= 5 / math.sqrt(n)


def test_sample_counters_give_each_sample_its_own_numbers() -> None:
    key = Key(12345).tensor()
    whole, _ = normal_pair(key, sample_counters(torch.arange(4), 6), torch.float64)
    part, _ = normal_pair(key, sample_counters(torch.tensor([2, 3]), 6), torch.float64)
    assert torch.equal(whole[2:], part)  # sample s reads counters 1 + 6 s ... 6 (s + 1)
    other, _ = normal_pair(Key(54321).tensor(), sample_counters(torch.arange(4), 6), torch.float64)
    assert not torch.equal(whole, other)


def test_key_derivation_uses_the_same_mixer() -> None:
    from aocsim.hardware.engine.keys import _mix

    gen = torch.Generator().manual_seed(3)
    for s in torch.randint(-(1 << 63), (1 << 63) - 1, (50,), generator=gen, dtype=torch.int64):
        assert _mix(int(s) & MASK) == _splitmix64_reference(int(s))


def test_the_stream_s_first_normals_are_pinned() -> None:
    """The same key and counter give the same normals in every release (a resumed sweep, a rerun figure):
    the first three pairs of key 12345, float64, to the bit (and float32 the same numbers rounded)."""
    a, b = normal_pair(torch.tensor(12345), torch.arange(3), torch.float64)
    assert [x.hex() for x in a.tolist()] == ["0x1.90b42d27ba9c4p+0", "0x1.36f4833d60460p-1", "0x1.31963ba623681p-4"]
    assert [x.hex() for x in b.tolist()] == ["-0x1.fefe7343ad005p-2", "0x1.583ee5b72873dp-1", "0x1.05d535c5eb13ep-2"]
    a32, b32 = normal_pair(torch.tensor(12345), torch.arange(3), torch.float32)
    assert torch.allclose(a32.double(), a, rtol=1e-6) and torch.allclose(b32.double(), b, rtol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_normals_are_box_muller_of_the_stream_s_uniforms_to_the_bit(dtype: torch.dtype) -> None:
    """Each pair is Box-Muller of u1 = (k1 + 1) / 2^32, u2 = (k2 + 1) / 2^32 with k1, k2 the low and high
    halves of SplitMix64's number: converted, scaled and turned into an angle one step at a time here
    (Python integers, then one torch operation per step in the working precision), against the stream's
    fused products (conversion inside the product, 2 pi inside the scale)."""
    key, n = 987654321, 4096
    number = [_splitmix64_reference(key + i * GOLDEN_GAMMA) for i in range(n)]  # counter i: key + i gamma
    k1 = torch.tensor([(x & 0xFFFFFFFF) + 1 for x in number], dtype=torch.float64).to(dtype)  # exact, then rounded
    k2 = torch.tensor([(x >> 32) + 1 for x in number], dtype=torch.float64).to(dtype)
    u1, u2 = k1 * 2.0 ** -32, k2 * 2.0 ** -32
    radius, angle = (u1.log() * -2.0).sqrt(), u2 * (2.0 * math.pi)
    a, b = normal_pair(torch.tensor(key), torch.arange(n), dtype)
    assert torch.equal(a, torch.cos(angle) * radius) and torch.equal(b, torch.sin(angle) * radius)


@pytest.mark.slow
def test_a_loop_compiled_first_leaves_the_eager_stream_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """A noisy loop compiled before any eager float32 draw (a compiled run first in its process): the
    trace makes the step's and the stream's constants (`engine/scalars.py`) as graph constants and keeps
    none (kept, they would be the tracer's fake tensors), so eager draws after it give their own numbers;
    compiled and eager runs agree to float32 rounding."""
    from aocsim.hardware.engine import backends, scalars
    from aocsim.hardware.engine.loop import OpticalLoop

    monkeypatch.setenv("AOCSIM_KERNEL_DIR", "off")  # traced here, not read from the kernel store
    monkeypatch.setattr(backends, "GRAPHS", backends.GRAPHS.fresh())
    w = torch.randn(48, 48, generator=torch.Generator().manual_seed(0))
    x = torch.rand(8, 48, generator=torch.Generator().manual_seed(1))
    loops = [OpticalLoop("aoc48", w, alpha=0.5, beta=18.6, compile=flag, generator=0) for flag in (True, False)]
    monkeypatch.setattr(scalars, "_KEPT", {})
    with torch.no_grad():
        fast, slow = (loop.iterate(torch.zeros(8, 48), x, 12, generator=1) for loop in loops)
    assert all(type(t) is torch.Tensor for kept in scalars._KEPT.values() for t in kept)
    torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-5)
    a, b = normal_pair(torch.tensor(12345), torch.arange(3), torch.float32)
    reference = normal_pair(torch.tensor(12345), torch.arange(3), torch.float64)
    torch.testing.assert_close((a.double(), b.double()), reference, rtol=1e-6, atol=1e-7)


def test_a_trace_keeps_none_of_the_streams_constants(monkeypatch: pytest.MonkeyPatch) -> None:
    """Traced before any eager draw (torch.export, as the compiled backends do), the stream makes its scales
    and integer operands as constants of the graph and keeps none of them: kept, the tracer's tensors would
    serve later eager draws. Eager draws after the trace are the stream's own numbers."""
    from aocsim.hardware.engine import scalars

    monkeypatch.setattr(scalars, "_KEPT", {})

    class Draw(torch.nn.Module):
        def forward(self, key: torch.Tensor, counters: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return normal_pair(key, counters, torch.float32)

    traced = torch.export.export(Draw(), (torch.tensor(12345), torch.arange(3)))
    assert scalars._KEPT == {}
    a, b = normal_pair(torch.tensor(12345), torch.arange(3), torch.float32)
    assert all(torch.equal(x, y) for x, y in zip((a, b), traced.module()(torch.tensor(12345), torch.arange(3))))
    reference = normal_pair(torch.tensor(12345), torch.arange(3), torch.float64)
    torch.testing.assert_close((a.double(), b.double()), reference, rtol=1e-6, atol=1e-7)


def test_kept_scalars_are_bounded_and_a_nan_is_never_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """`scalars` keeps the last SCALARS_KEPT groups (a sweep's tile products bring new numbers at every
    point) and serves a kept group's own tensors; a NaN group is made each call and not kept."""
    from aocsim.hardware.engine import scalars

    monkeypatch.setattr(scalars, "_KEPT", {})
    monkeypatch.setattr(scalars, "SCALARS_KEPT", 8)
    first = scalars.scalars((0.25, 3.0), torch.float32, torch.device("cpu"))
    assert scalars.scalars((0.25, 3.0), torch.float32, torch.device("cpu"))[0] is first[0]
    for i in range(20):
        (value,) = scalars.scalars((float(i),), torch.float64, torch.device("cpu"))
        assert float(value) == i and value.dtype == torch.float64
    assert len(scalars._KEPT) == 8 and ((0.25, 3.0), torch.float32, torch.device("cpu")) not in scalars._KEPT
    (nan,) = scalars.scalars((float("nan"),), torch.float32, torch.device("cpu"))
    assert bool(torch.isnan(nan)) and len(scalars._KEPT) == 8
    assert all(v == v for key in scalars._KEPT for v in key[0])
