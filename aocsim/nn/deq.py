"""Deep equilibrium (DEQ) cell: the AOC's native workload.

    z* = alpha z* + beta W f(z*) + U x + b,    logits = V z* + c,

f = tanh on the exact path. With `split` = k > 0 the input enters state
variables [0, k) only and the readout reads [k, N) only, so every answer
crosses the feedback W at least once (with W = 0 the readout sees only
biases): the loop, not a linear shortcut, carries the computation.
W may be block structured so that several layers
share one state (and one machine): `feedback` (every block, the DEQ),
`feedforward` (only block l -> l+1, a layered network computed as a fixed
point) or `hopfield` (full and symmetric, W = (W0 + W0^T) / 2).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import torch
from torch import nn

from aocsim._checks import integer, real, short
from aocsim.errors import InputError
from aocsim.solve.backward import Backward, Implicit, equilibrium
from aocsim.solve.result import SolveResult

STRUCTURES = ("feedback", "feedforward", "hopfield")


@dataclass(frozen=True)
class DEQConfig:
    """Architecture of a DEQ cell.

    Attributes:
        state_size: N, number of state variables (loop channels).
        input_size: features of x.
        output_size: readout size (classes).
        alpha: leak, scalar in [0, 1).
        structure: one of `feedback`, `feedforward`, `hopfield`.
        blocks: layer sizes summing to N (one block = the whole state).
        split: 0 (input into and readout from every variable) or k in [1, N): input into
            variables [0, k), readout from [k, N) (module docstring).
    """

    state_size: int
    input_size: int
    output_size: int
    alpha: float = 0.5
    structure: str = "feedback"
    blocks: tuple[int, ...] = field(default=())
    split: int = 0

    def __post_init__(self) -> None:
        check_loop_config(self)
        if self.structure not in STRUCTURES:
            raise InputError(f"DEQConfig.structure = {self.structure!r}; expected one of {STRUCTURES}")
        blocks = (tuple(self.blocks) or (self.state_size,)) if isinstance(self.blocks, (tuple, list)) else (0,)
        if not all(isinstance(b, int) and not isinstance(b, bool) for b in blocks) \
                or sum(blocks) != self.state_size or min(blocks) < 1:
            shown = list(self.blocks) if isinstance(self.blocks, (tuple, list)) else short(self.blocks)
            raise InputError(f"DEQConfig.blocks = {shown}; expected positive integer sizes summing "
                             f"to state_size = {self.state_size}")
        object.__setattr__(self, "blocks", blocks)
        check_split(self, "variables")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["blocks"] = list(self.blocks)
        return d


def check_loop_config(config: Any) -> None:
    """The size and alpha checks of a DEQConfig or TwinDEQConfig (sizes stored as int), each error naming the
    config's class; the split is checked apart (`check_split`), after a DEQ's structure."""
    cls = type(config).__name__
    for name in ("state_size", "input_size", "output_size"):
        object.__setattr__(config, name, integer(getattr(config, name), f"{cls}.{name}", minimum=1))
    real(config.alpha, f"{cls}.alpha", low=0.0, high=1.0, high_open=True)


def check_split(config: Any, noun: str) -> None:
    """The split of a DEQConfig or TwinDEQConfig: an integer in [0, N); `noun`: what it divides ("variables",
    "channels")."""
    split = config.split
    if isinstance(split, bool) or not isinstance(split, int) or not 0 <= split < config.state_size:
        raise InputError(f"{type(config).__name__}.split = {short(split)}; expected an integer in [0, "
                         f"{config.state_size - 1}] (0: no split; k: input into {noun} [0, k), readout from [k, N))")


def block_mask(blocks: tuple[int, ...], structure: str) -> torch.Tensor:
    """0/1 mask [N, N] ([out, in]) of the weights the structure allows."""
    n = sum(blocks)
    if structure != "feedforward":
        return torch.ones(n, n)
    mask = torch.zeros(n, n)
    starts = [sum(blocks[:i]) for i in range(len(blocks))]
    for (s_in, b_in), (s_out, b_out) in zip(zip(starts, blocks), zip(starts[1:], blocks[1:])):
        mask[s_out:s_out + b_out, s_in:s_in + b_in] = 1.0
    return mask


def split_masks(n: int, split: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """0/1 masks of U's rows [N, 1] and V's columns [1, N] (all ones when split = 0)."""
    state = torch.arange(n)
    inject = (state < split) if split else torch.ones(n, dtype=torch.bool)
    readout = (state >= split) if split else torch.ones(n, dtype=torch.bool)
    return inject.to(dtype)[:, None], readout.to(dtype)[None, :]


@dataclass(frozen=True)
class DEQOutput:
    """Logits [B, output_size], fixed point z* [B, N], forward solve result."""

    logits: torch.Tensor
    z: torch.Tensor
    solve: SolveResult


class DigitalMaps(nn.Module):
    """What DEQ and TwinDEQ share: the digital maps around their loop, and `predict`. A subclass has `config`
    (state_size, input_size, output_size, split), `weight` (x takes its dtype and device) and `forward`."""

    config: Any
    weight: nn.Parameter

    def add_digital_maps(self, dtype: torch.dtype, uniform: Callable[..., torch.Tensor]) -> None:
        """U [N, K] and b (the injection), V [C, N] and c (the readout), drawn by `uniform(*shape, bound=)` in
        that order, with the split's masks applied (stored weights show the split as exact zeros)."""
        n, k, c = self.config.state_size, self.config.input_size, self.config.output_size
        self.inject_weight = nn.Parameter(uniform(n, k, bound=k ** -0.5))
        self.inject_bias = nn.Parameter(torch.zeros(n, dtype=dtype))
        self.readout_weight = nn.Parameter(uniform(c, n, bound=n ** -0.5))
        self.readout_bias = nn.Parameter(torch.zeros(c, dtype=dtype))
        inject_rows, readout_cols = split_masks(n, self.config.split, dtype)
        self.register_buffer("inject_mask", inject_rows, persistent=False)
        self.register_buffer("readout_mask", readout_cols, persistent=False)
        with torch.no_grad():
            self.inject_weight.mul_(self.inject_mask)
            self.readout_weight.mul_(self.readout_mask)

    def injection(self, x: torch.Tensor) -> torch.Tensor:
        """u = U x + b, [B, N] (volts in TwinDEQ; U restricted to the input variables when split)."""
        x = check_input(x, self.config.input_size, self.weight)
        return x @ (self.inject_weight * self.inject_mask).T + self.inject_bias

    def readout(self, z: torch.Tensor) -> torch.Tensor:
        """V z + c, [B, output_size] (V restricted to the readout variables when split)."""
        return z @ (self.readout_weight * self.readout_mask).T + self.readout_bias

    @torch.no_grad()
    def predict(self, x: torch.Tensor, **solve_options: Any) -> torch.Tensor:
        """Class ids [B] on the exact path."""
        return self.forward(x, **solve_options).logits.argmax(dim=1)


class DEQ(DigitalMaps):
    """DEQ cell with linear injection and readout (see the module docstring).

    Args:
        config: the architecture.
        beta: initial loop gain (trainable scalar).
        dtype: parameter dtype; float64 is the exact reference.
        generator: RNG for the initial weights (explicit seed).
    """

    def __init__(self, config: DEQConfig, *, beta: float = 1.0, dtype: torch.dtype = torch.float64,
                 generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.config = config
        n = config.state_size

        def uniform(*shape: int, bound: float) -> torch.Tensor:
            return (torch.rand(*shape, generator=generator, dtype=dtype) * 2 - 1) * bound

        self.weight = nn.Parameter(uniform(n, n, bound=1.0 / n))
        self.beta = nn.Parameter(torch.tensor(float(beta), dtype=dtype))
        self.add_digital_maps(dtype, uniform)
        # Derived from the config, so not stored with the weights.
        self.register_buffer("mask", block_mask(config.blocks, config.structure).to(dtype),
                             persistent=False)

    def effective_weight(self) -> torch.Tensor:
        """W with its block structure applied, [N, N] in [out, in] convention."""
        w = self.weight * self.mask
        if self.config.structure == "hopfield":
            w = 0.5 * (w + w.T)
        return w

    def operator(self) -> torch.Tensor:
        """beta W: the matrix the loop multiplies f(z) by."""
        return self.beta * self.effective_weight()

    def step(self, z: torch.Tensor, injection: torch.Tensor, operator: torch.Tensor | None = None) -> torch.Tensor:
        """One exact loop iteration: alpha z + beta W tanh(z) + injection (`operator`: beta W as given,
        e.g. quantised in hardware-aware training; default `self.operator()`)."""
        op = self.operator() if operator is None else operator
        return self.config.alpha * z + torch.tanh(z) @ op.T + injection

    def forward(self, x: torch.Tensor, *, backward: Backward = Implicit(), z0: torch.Tensor | None = None,
                **solve_options: Any) -> DEQOutput:
        """Solve for z* and read out.

        Args:
            x: inputs [B, input_size] (converted to the model's dtype).
            backward: gradient mode (`Implicit`, `Phantom`, `Unrolled`).
            z0: initial state [B, N] (zeros by default).
            **solve_options: `aocsim.solve` settings (solver, atol, rtol, max_iter).
        """
        u = self.injection(x)
        if z0 is None:
            z0 = torch.zeros_like(u)
        z, result = equilibrium(lambda z: self.step(z, u), z0, backward=backward, **solve_options)
        return DEQOutput(self.readout(z), z, result)

    def contraction_bound(self) -> float:
        """|alpha| + ||beta W||_2: a Lipschitz bound of the map (< 1 means contractive)."""
        with torch.no_grad():
            return abs(self.config.alpha) + float(torch.linalg.matrix_norm(self.operator(), ord=2))


def check_input(x: torch.Tensor, k: int, like: torch.Tensor) -> torch.Tensor:
    """x as a finite real tensor [B >= 1, k] in `like`'s dtype and device, or a one-line InputError."""
    if not isinstance(x, torch.Tensor):
        raise InputError(f"x = {short(x)}; expected a tensor [B, {k}] (input_size = {k})")
    if x.dtype == torch.bool or x.is_complex():  # converting would drop the imaginary part / mean 0 and 1
        raise InputError(f"x has dtype {str(x.dtype).replace('torch.', '')}; expected real numbers "
                         "(a floating-point or integer tensor)")
    if x.ndim != 2 or x.shape[1] != k:
        raise InputError(f"x has shape {tuple(x.shape)}; expected [B, {k}] (input_size = {k})")
    if x.shape[0] == 0:
        raise InputError(f"x has shape {tuple(x.shape)}; expected at least one sample [B >= 1, {k}]")
    if not bool(torch.isfinite(x).all()):
        raise InputError("x contains NaN or infinite values; expected finite numbers")
    return x.to(device=like.device, dtype=like.dtype)
