"""Counter-based Gaussian draws that compile into the loop's kernels.

torch's CPU generator (a Mersenne twister) is sequential and costs about as
much as the rest of a noisy loop step. A counter-based generator computes the
i-th number directly from (key, i), so the draws fuse into the compiled step
and run on every core. The stream is SplitMix64 (Steele, Lea & Flood, "Fast
splittable pseudorandom number generators", OOPSLA 2014): number i of key k is
mix(k + (i + 1) * 0x9E3779B97F4A7C15), the generator's own output sequence,
which passes BigCrush. Each 64-bit output gives two 32-bit uniforms in (0, 1]
and, by the Box-Muller transform, two independent standard normals.

All arithmetic is on int64 tensors (wrapping multiplication; logical shifts
by masking), so the same code runs eagerly and inside a traced graph.
"""

from __future__ import annotations

import torch

GOLDEN_GAMMA = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
_LOW32 = 0xFFFFFFFF


def _signed(value: int) -> int:
    """An unsigned 64-bit constant as the int64 with the same bits."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _shr(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 bits (torch's >> is arithmetic)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def splitmix64(state: torch.Tensor) -> torch.Tensor:
    """SplitMix64's output function on int64 states (two's complement bits)."""
    z = (state ^ _shr(state, 30)) * _signed(_MIX1)
    z = (z ^ _shr(z, 27)) * _signed(_MIX2)
    return z ^ _shr(z, 31)


def normal_pair(base: torch.Tensor, offsets: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Two independent standard-normal tensors shaped like `offsets`: numbers base + offsets of the stream.

    `offsets` is data (`keys.sample_counters`), not an index expression, so that compilers
    do not try to reason about the wrapping 64-bit products symbolically.
    """
    bits = splitmix64(base + offsets * _signed(GOLDEN_GAMMA))
    scale = 2.0 ** -32  # 32-bit uniforms in (0, 1]: u = (k + 1) / 2^32
    u1 = ((bits & _LOW32) + 1).to(torch.float64 if dtype == torch.float64 else torch.float32) * scale
    u2 = (_shr(bits, 32) + 1).to(u1.dtype) * scale
    radius = torch.sqrt(-2.0 * torch.log(u1))
    angle = (2.0 * torch.pi) * u2
    return (radius * torch.cos(angle)).to(dtype), (radius * torch.sin(angle)).to(dtype)
