"""The parts of an implicit SSM (aocsim/nn/implicit_ssm.py): its configuration, RMSNorm, the
Mamba2-style block (in projection, causal conv, selective scan, gated output projection), the cache
sequential mode carries between tokens, and the block's elementwise functions (a module of their own, which
a placed copy may swap as it swaps the linear maps)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from aocsim.errors import InputError
from aocsim.nn.ssm_scan import chunked_scan, scan_step

M = TypeVar("M", bound=nn.Module)


@dataclass(frozen=True)
class SSMConfig:
    """Architecture. d_inner = expand d_model, heads of `head_dim` channels, one B/C group."""

    vocab_size: int
    d_model: int = 32
    d_state: int = 8
    expand: int = 2
    head_dim: int = 16
    n_layers: int = 1
    conv_kernel: int = 4
    implicit: bool = True
    weight_norm: bool = True

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "d_state", "expand", "head_dim", "n_layers", "conv_kernel"):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise InputError(f"SSMConfig.{name} = {value!r}; expected an integer >= 1")
        if self.d_inner % self.head_dim:
            raise InputError(f"SSMConfig.head_dim = {self.head_dim} must divide d_inner = {self.d_inner}")

    @property
    def d_inner(self) -> int:
        return self.expand * self.d_model

    @property
    def n_heads(self) -> int:
        return self.d_inner // self.head_dim

    @property
    def conv_dim(self) -> int:
        return self.d_inner + 2 * self.d_state

    @property
    def d_in_proj(self) -> int:
        return 2 * self.d_inner + 2 * self.d_state + self.n_heads

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * w over the last dimension."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def uninitialised(cls: type[M], *args: Any, **kwargs: Any) -> M:
    """cls(*args, **kwargs) with its parameters left as allocated: no draw from the global RNG (the models'
    `_init_weights` draw from their own generator). nn.utils.skip_init does the same through the meta
    device, whose first random fill imports torch._dynamo: about 1 s in every process that builds a model."""
    bare = type(cls.__name__, (cls,), {"reset_parameters": lambda self: None})
    module = bare(*args, **kwargs)
    module.__class__ = cls
    return module


def _linear(d_in: int, d_out: int, weight_norm: bool, bias: bool = False) -> nn.Module:
    layer = uninitialised(nn.Linear, d_in, d_out, bias=bias)
    return nn.utils.parametrizations.weight_norm(layer) if weight_norm else layer


@dataclass
class TokenCache:
    """What sequential mode carries between tokens for one block."""

    conv: torch.Tensor  # [B, K - 1, conv_dim]: the last K - 1 pre-conv inputs
    ssm: torch.Tensor  # [B, H, P, N]


class Elementwise(nn.Module):
    """The elementwise functions of a block, by site ("conv": SiLU after the causal conv, "dt":
    softplus of the step size, "gate": SiLU of the gate). This one is exact (torch's functions) and holds
    no weights (nothing in the state dict)."""

    SITES = ("conv", "dt", "gate")

    def silu(self, x: torch.Tensor, site: str) -> torch.Tensor:
        return F.silu(x)

    def softplus(self, x: torch.Tensor, site: str) -> torch.Tensor:
        return F.softplus(x)



class Mamba2Block(nn.Module):
    """One block: returns the residual update o(z, u) (see the module docstring).

    Without the injection (u = None) it is the standard Mamba2 pre-norm mixer, norm -> in_proj -> conv ->
    scan -> gated norm -> out_proj (the plain language model, aocsim/nn/mamba2_lm.py). `eps`: its RMSNorms'.
    """

    def __init__(self, cfg: SSMConfig, eps: float = 1e-6) -> None:
        super().__init__()
        self.cfg = cfg
        self.norm = RMSNorm(cfg.d_model, eps)
        self.in_proj = _linear(cfg.d_model, cfg.d_in_proj, cfg.weight_norm)
        self.conv_weight = nn.Parameter(torch.empty(cfg.conv_dim, cfg.conv_kernel))  # drawn by the model
        self.conv_bias = nn.Parameter(torch.zeros(cfg.conv_dim))
        # dt initialised log-uniform in [1e-3, 1e-1] as in Mamba2, stored through its softplus inverse.
        dt = torch.exp(torch.linspace(-6.9, -2.3, cfg.n_heads))
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.A_log = nn.Parameter(torch.log(torch.linspace(1.0, 16.0, cfg.n_heads)))
        self.D = nn.Parameter(torch.ones(cfg.n_heads))
        self.out_norm = RMSNorm(cfg.d_inner, eps)
        self.out_proj = _linear(cfg.d_inner, cfg.d_model, cfg.weight_norm)
        self.elementwise = Elementwise()  # SiLU and softplus, exact

    def _split(self, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        c = self.cfg
        return p[..., : c.d_inner], p[..., c.d_inner: c.d_inner + c.conv_dim], p[..., c.d_inner + c.conv_dim:]

    def _ssm_inputs(self, xbc: torch.Tensor, delta: torch.Tensor):
        c = self.cfg
        x = xbc[..., : c.d_inner].unflatten(-1, (c.n_heads, c.head_dim))
        bm, cm = xbc[..., c.d_inner: c.d_inner + c.d_state], xbc[..., c.d_inner + c.d_state:]
        return x, self.elementwise.softplus(delta + self.dt_bias, "dt"), -torch.exp(self.A_log), bm, cm

    def _gated(self, y: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return self.out_norm(y.flatten(-2) * self.elementwise.silu(g, "gate"))

    def _out(self, y: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return self.out_proj(self._gated(y, g))

    def _in(self, z: torch.Tensor, u: torch.Tensor | None) -> torch.Tensor:
        p = self.in_proj(self.norm(z))
        return p if u is None else p + u

    def forward(self, z: torch.Tensor, u: torch.Tensor | None = None, *, chunk: int = 64) -> torch.Tensor:
        """Whole sequence: z [B, L, d_model], u [B, L, d_in_proj] or None -> o [B, L, d_model]."""
        return self.segment(z, u, chunk=chunk)[0]

    def segment(self, z: torch.Tensor, u: torch.Tensor | None = None, cache: TokenCache | None = None, *,
                chunk: int = 64) -> tuple[torch.Tensor, TokenCache]:
        """A run of consecutive tokens after those that `cache` summarises (None: the sequence starts here).

        z [B, T, d_model], u [B, T, d_in_proj] or None -> (o [B, T, d_model], the cache after the run).
        """
        g, xbc, delta = self._split(self._in(z, u))
        k, length = self.cfg.conv_kernel, z.shape[1]
        weight = self.conv_weight[:, None, :]
        if cache is None:  # zero left context: the conv's padding
            conv = F.conv1d(xbc.transpose(1, 2), weight, self.conv_bias, padding=k - 1,
                            groups=self.cfg.conv_dim)[..., :length]
            window = xbc[:, length - (k - 1):] if length >= k - 1 else F.pad(xbc, (0, 0, k - 1 - length, 0))
            state = None
        else:  # the previous tokens' conv inputs in front of the run
            full = torch.cat([cache.conv, xbc], dim=1)
            conv = F.conv1d(full.transpose(1, 2), weight, self.conv_bias, groups=self.cfg.conv_dim)
            window, state = full[:, -(k - 1):], cache.ssm
        x, dt, A, bm, cm = self._ssm_inputs(self.elementwise.silu(conv.transpose(1, 2), "conv"), delta)
        y, state = chunked_scan(x, dt, A, bm, cm, self.D, state, chunk=chunk)
        return self._out(y, g), TokenCache(window, state)

    def init_cache(self, batch: int, like: torch.Tensor) -> TokenCache:
        c = self.cfg
        return TokenCache(like.new_zeros(batch, c.conv_kernel - 1, c.conv_dim),
                          like.new_zeros(batch, c.n_heads, c.head_dim, c.d_state))

    def step(self, z: torch.Tensor, u: torch.Tensor | None, cache: TokenCache) -> tuple[torch.Tensor, TokenCache]:
        """One token: z [B, d_model], u [B, d_in_proj] or None -> (o [B, d_model], the cache after this token)."""
        p = self._in(z, u)
        h, cache = self.mix(p, cache)
        return self.out_proj(h), cache

    def mix(self, p: torch.Tensor, cache: TokenCache) -> tuple[torch.Tensor, TokenCache]:
        """One token's middle, between the two projections: p [B, d_in_proj] (in projection plus injection)
        -> (the out projection's input [B, d_inner], the cache after this token): conv, scan, gate, norm."""
        g, xbc, delta = self._split(p)
        window = torch.cat([cache.conv, xbc[:, None]], dim=1)  # [B, K, conv_dim], oldest first
        conv = (window * self.conv_weight.T[None]).sum(1) + self.conv_bias
        x, dt, A, bm, cm = self._ssm_inputs(self.elementwise.silu(conv, "conv"), delta)
        y, state = scan_step(x, dt, A, bm, cm, self.D, cache.ssm)
        return self._gated(y, g), TokenCache(window[:, 1:], state)


def residual_stack(blocks: nn.ModuleList, z: torch.Tensor, u: torch.Tensor | None,
                   caches: list[TokenCache] | None, *, chunk: int | None = None
                   ) -> tuple[torch.Tensor, list[TokenCache]]:
    """z through the residual blocks, z <- z + o_l(z, u), each block after its cache (`caches`, one per block;
    None: the sequence starts here): a run of tokens z [B, T, d_model] (`segment`) when `chunk` is given, else
    one token z [B, d_model] (`step`). Returns (the last block's z, the caches after)."""
    new = []
    for block, cache in zip(blocks, [None] * len(blocks) if caches is None else caches):
        o, cache = block.step(z, u, cache) if chunk is None else block.segment(z, u, cache, chunk=chunk)
        z = z + o
        new.append(cache)
    return z, new
