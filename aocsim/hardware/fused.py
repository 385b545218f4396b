"""Inference iterations as compiled kernels (`OpticalLoop(..., compile=True)`).

Eager PyTorch runs the folded step as ~20 separate passes over the [B, N]
state (the calibrated sigmoid alone is 14), so on a CPU the elementwise work
costs more than the folded matrix product. Here one step, or a block of
`steps` unrolled steps, is traced once (`make_fx`) and compiled by Inductor
into vectorised C++ loops around the product: the nonlinearity, both LED
cubics and the node update of the previous step fuse into one pass, and the
product acts on the two LED signals [q+, q-] (2N wide) instead of the power
features [t, t^2, t^3]. Calling the compiled graph directly skips dynamo's
guards (~20 us per call), which matter at this size.

With noise on, one step is one graph that also draws its Gaussian numbers:
a counter-based generator (`aocsim.hardware.counter_rng`, keyed by one draw
from the loop's generator per `iterate` / `readout` call) computes them inside
the kernel, on every core, instead of torch's sequential CPU generator, which
costs as much as the rest of the step. Same seed, same bits; the numbers are
not the eager loop's (statistically the same, tests/test_loop.py).

The graph depends only on the shapes, dtype, device, the number of steps and
which stages exist; every number (calibration, gains, rails) is an input, so
one compiled graph serves every loop with that layout. The noiseless graphs
equal the eager step to float rounding (tests/test_loop.py). Compiling needs a C++ compiler
and takes a few seconds per new layout, so it is opt-in.
"""

from __future__ import annotations

from typing import Callable

import torch

from aocsim.errors import AocsimError
from aocsim.hardware.counter_rng import normal_pair

_GRAPHS: dict[tuple, Callable[..., object]] = {}


def _nonlinearity(z: torch.Tensor, sigmoid: torch.Tensor, tanh: bool) -> torch.Tensor:
    """t = f(z): tanh, or the calibrated sigmoid with (1 + |u|^c)^(-1/c) in base-2 exp / log
    (as in components.algebraic_sigmoid_fast)."""
    if tanh:
        return torch.tanh(z)
    a, b, c, d, f, g = sigmoid.unbind()
    u = a * z + b
    return d * u * torch.exp2(torch.log2(1.0 + torch.exp2(c * torch.log2(u.abs()))) * (-1.0 / c)) + f + g * z


def _steps(z: torch.Tensor, z_prev: torch.Tensor, offset: torch.Tensor, operator_t: torch.Tensor,
           sigmoid: torch.Tensor, led: torch.Tensor, node: torch.Tensor, *, steps: int, tanh: bool,
           saturate: bool, respond: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """`steps` noiseless iterations, the folded way (same equation as `OpticalLoop._advance`).

    Args:
        z, z_prev: states [B, N].
        offset: inject + the optical constant at this gain, [B, N].
        operator_t: the folded operator on [q+, q-] times the gain, [2N, N].
        sigmoid: the nonlinearity's [a, b, c, d, f, g] (unused with tanh).
        led: [[p3, p2, p1] of P+, [p3, p2, p1] of P-], p_k the coefficient of t^k (the constant
            terms live in `offset`).
        node: [alpha + gamma, gamma, low rail, high rail, response].
        steps, tanh, saturate, respond: the graph's layout (fixed when compiled).
    Returns:
        (z[k + steps], z[k + steps - 1]).
    """
    for _ in range(steps):
        t = _nonlinearity(z, sigmoid, tanh)
        q_pos = t * (led[0, 2] + t * (led[0, 1] + t * led[0, 0]))
        q_neg = t * (led[1, 2] + t * (led[1, 1] + t * led[1, 0]))
        y = torch.addmm(offset, torch.cat([q_pos, q_neg], dim=1), operator_t)
        y = y + node[0] * z - node[1] * z_prev
        if saturate:
            y = y.clamp(node[2], node[3])
        if respond:
            y = z + node[4] * (y - z)
        z, z_prev = y, z
    return z, z_prev


def _noisy_step(z: torch.Tensor, z_prev: torch.Tensor, inject: torch.Tensor, det_t: torch.Tensor,
                det_offset: torch.Tensor, sigmoid: torch.Tensor, led: torch.Tensor, rng_base: torch.Tensor,
                rng_offsets: torch.Tensor, noise: torch.Tensor, node_scale: torch.Tensor, node_offset: torch.Tensor,
                node: torch.Tensor, *, tanh: bool, rin: bool, detector: bool, saturate: bool,
                respond: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """One iteration with per-iteration noise (same equation as `OpticalLoop.optical` + `_advance`).

    Args:
        det_t, det_offset: the folded detector operator on [P+(t), P-(t)], [2N, 2N], and its offset [2N].
        led: the full cubics [[p3, p2, p1, p0] of P+, ... of P-].
        rng_base, rng_offsets: the counter generator's state before this step's B N numbers (int64
            0-dim) and 1 ... B N as an int64 [B, N] tensor (`counter_rng.counters`); number i gives
            the RIN draw of LED i and the detector draw of channel i (row-major over [B, N]).
        noise: [RIN std, a, 2 b, gain] with var(D_P - D_Q) = a (|D_P| + |D_Q|) + 2 b.
        node_scale, node_offset: y = gain (node_scale (D_P - D_Q) + node_offset) + ... ([N] each; the
            offset already holds the gain-free part, see `OpticalLoop._fused_noisy`).
    """
    rin_draw, det_draw = normal_pair(rng_base, rng_offsets, z.dtype)
    t = _nonlinearity(z, sigmoid, tanh)
    p = led[0, 3] + t * (led[0, 2] + t * (led[0, 1] + t * led[0, 0]))
    q = led[1, 3] + t * (led[1, 2] + t * (led[1, 1] + t * led[1, 0]))
    if rin:
        scale = rin_draw * noise[0] + 1.0
        p, q = p * scale, q * scale
    signals = torch.addmm(det_offset, torch.cat([p, q], dim=1), det_t)
    n = z.shape[1]
    d_pos, d_neg = signals[:, :n], signals[:, n:]
    diff = d_pos - d_neg
    if detector:
        diff = diff + torch.sqrt((d_pos.abs() + d_neg.abs()) * noise[1] + noise[2]) * det_draw
    y = noise[3] * (node_scale * diff) + node_offset + inject + node[0] * z - node[1] * z_prev
    if saturate:
        y = y.clamp(node[2], node[3])
    if respond:
        y = z + node[4] * (y - z)
    return y, z


_KERNELS = {"steps": _steps, "noisy_step": _noisy_step}


def _compile(kernel: str, args: tuple[torch.Tensor, ...], flags: dict) -> Callable[..., object]:
    from torch._inductor import compile as inductor_compile
    from torch.fx.experimental.proxy_tensor import make_fx

    fn = _KERNELS[kernel]
    with torch.no_grad():
        graph = make_fx(lambda *a: fn(*a, **flags))(*args)
        return inductor_compile(graph, list(args))


def run(kernel: str, *args: torch.Tensor, **flags: bool | int) -> tuple[torch.Tensor, torch.Tensor]:
    """Run `kernel` ("steps" or "noisy_step") compiled, compiling on first use of a layout.

    A missing toolchain or a compiler failure becomes one clear `AocsimError`.
    """
    z = args[0]  # every other input's shape follows from z's [B, N] and the kernel
    key = (kernel, z.shape, z.dtype, z.device, tuple(flags.items()))
    if key not in _GRAPHS:
        try:
            _GRAPHS[key] = _compile(kernel, args, flags)
        except Exception as exc:  # Inductor raises many types (missing compiler, codegen failure)
            first = str(exc).splitlines()[0] if str(exc) else ""
            raise AocsimError(f"compile=True: could not compile the fused loop step ({type(exc).__name__}: "
                              f"{first}); it needs a C++ compiler; compile=False runs the same loop eagerly"
                              ) from exc
    out = _GRAPHS[key](*args)
    return out[0], out[1]
