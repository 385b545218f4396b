"""IBM aihwkit-lightning's analog layer iterated as aocsim's loop is: a yardstick for `aocsim bench loop`.

aihwkit-lightning (Büchel et al., IBM; pip install aihwkit-lightning) simulates an analog matrix-vector
product with a DAC and an ADC of given resolution and Gaussian output noise; `AnalogLinear` is its layer.
Iterated z <- z + alpha (tanh(A z + x) - z) with A an N x N `AnalogLinear` at 8-bit input and output
resolution and output noise, it does per iteration what the noisy loop does: one noisy, quantised analog
product, a nonlinearity and a relaxation. Its output noise is drawn only in training mode, so it runs in
training mode without gradients (its input range then follows the data, as it would while training). An
optional dependency: without it the bench leaves its column out.
"""

from __future__ import annotations

import contextlib
import io
from typing import Callable

import torch

OUT_NOISE = 0.04  # output noise std, relative to the output bound's scale (aihwkit's usual inference setting)
OUT_BOUND = 10.0
RESOLUTION = 2 ** 8 - 2  # 8 bits (aihwkit's convention: steps, 2^b - 2)
ALPHA = 0.5


def available() -> bool:
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # its import prints which kernels it found
            import aihwkit_lightning.nn  # noqa: F401
    except ImportError:
        return False
    return True


def analog_loop(n: int, dtype: torch.dtype, *, compiled: bool = False, seed: int = 0
                ) -> Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]:
    """iterate(z0 [B, n], x [B, n], iterations) -> z: the module docstring's loop on an N x N `AnalogLinear`
    (compiled with torch.compile when asked)."""
    from aihwkit_lightning.nn import AnalogLinear
    from aihwkit_lightning.simulator.configs import TorchInferenceRPUConfig

    config = TorchInferenceRPUConfig()
    config.forward.inp_res = RESOLUTION
    config.forward.out_res = RESOLUTION
    config.forward.out_bound = OUT_BOUND
    config.forward.out_noise = OUT_NOISE
    config.pre_post.input_range.enable = True
    torch.manual_seed(seed)
    layer = AnalogLinear(n, n, bias=False, rpu_config=config, dtype=dtype)
    layer.train()  # its output noise is drawn in training mode only

    def step(z: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return z + ALPHA * (torch.tanh(layer(z) + x) - z)

    run_step = torch.compile(step, dynamic=False) if compiled else step

    def iterate(z0: torch.Tensor, x: torch.Tensor, iterations: int) -> torch.Tensor:
        z = z0
        with torch.no_grad():
            for _ in range(iterations):
                z = run_step(z, x)
        return z

    return iterate
