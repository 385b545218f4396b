"""Statistical parity between two strategies of one computation (a batch of other rows, a product in pieces,
seeds stacked, rows on their own tokens): the same seed and code path give the same bits, but another
strategy may round a product differently (a BLAS kernel changes with a call's rows), and a device's ADC can
turn a last bit into another code, which the loop then carries on. So two strategies are held to:

- the same discrete results (predictions, statuses, iteration counts) on at least `AGREE` of the entries;
- continuous values within a stated tolerance where the discrete results agree;
- the same statistics: the means of two sets of values within their standard errors (`assert_means_agree`).
"""

from __future__ import annotations

import math

import torch

AGREE = 0.995  # the share of samples or tokens whose discrete results must agree across strategies


def agreement(a: torch.Tensor, b: torch.Tensor) -> float:
    """The share of entries of a and b (one shape) that are equal."""
    if a.shape != b.shape:
        raise AssertionError(f"shapes {tuple(a.shape)} and {tuple(b.shape)} differ")
    return float((a == b).float().mean()) if a.numel() else 1.0


def assert_agree(a: torch.Tensor, b: torch.Tensor, what: str, least: float = AGREE) -> torch.Tensor:
    """a == b on at least `least` of the entries; returns where they agree."""
    share = agreement(a, b)
    assert share >= least, f"{what}: {share:.4f} of {a.numel()} entries agree; expected at least {least}"
    return a == b


def assert_means_agree(a: torch.Tensor, b: torch.Tensor, what: str, z: float = 3.0) -> None:
    """The means of a and b (finite entries) within z of their combined standard error (or equal)."""
    a, b = a[torch.isfinite(a)].double(), b[torch.isfinite(b)].double()
    se = math.sqrt(float(a.var(unbiased=True)) / a.numel() + float(b.var(unbiased=True)) / b.numel()) \
        if a.numel() > 1 and b.numel() > 1 else 0.0
    gap = abs(float(a.mean()) - float(b.mean()))
    assert gap <= z * se or gap == 0, f"{what}: means {float(a.mean()):.6g} and {float(b.mean()):.6g} differ by " \
                                      f"{gap:.3g}, more than {z} standard errors ({se:.3g})"


def assert_same_ssm_run(a, b, atol: float = 1e-5) -> None:
    """Two runs of an implicit SSM (`SSMOutput`s) in statistical parity (module docstring): predictions and
    iteration counts per token on `AGREE` of the tokens; states and residuals within atol on the tokens whose
    counts agree (a token stopped an iteration apart is elsewhere); the mean iteration count within its
    standard errors; traces evaluated alike on the tokens whose counts agree, to 1e-4."""
    assert_agree(a.logits.argmax(-1), b.logits.argmax(-1), "predictions")
    same = assert_agree(a.iterations, b.iterations, "iterations")
    assert_means_agree(a.iterations.float(), b.iterations.float(), "iterations")
    torch.testing.assert_close(a.z[same], b.z[same], rtol=0, atol=atol)
    torch.testing.assert_close(a.residuals[same], b.residuals[same], rtol=0, atol=atol)
    if a.trace is not None:
        depth = min(a.trace.shape[-1], b.trace.shape[-1])
        ta, tb = a.trace[same][..., :depth], b.trace[same][..., :depth]
        assert torch.equal(ta.isnan(), tb.isnan())
        torch.testing.assert_close(ta, tb, equal_nan=True, rtol=0, atol=1e-4)
