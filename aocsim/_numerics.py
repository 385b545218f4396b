"""Numerical helpers shared by the device's fits (docs/ARCHITECTURE.md)."""

from __future__ import annotations

import torch


def least_squares(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """x minimising ||a x - b|| for a full-rank a [R, K] (R >= K), b [R, ...]: a QR solve (LAPACK gels).

    Not torch's default driver: on the CPU the pivoted gelsy rounds differently from call to call (its
    last bits follow where the arrays lie in memory), and a fit must give the same bits in every process
    that makes it (compare's workers; tests/execute/test_ssm_on_device.py)."""
    return torch.linalg.lstsq(a, b, driver="gels").solution
