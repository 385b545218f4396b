"""A plain Mamba2 language model (Dao & Gu, "Transformers are SSMs", ICML 2024): the standard explicit
baseline next to the implicit models (issue 42).

    z_0 = Emb(x)
    z_l = z_{l-1} + Mixer_l(RMSNorm(z_{l-1}))         l = 1 .. n_layers (residual pre-norm blocks)
    logits = RMSNorm_f(z_n) Emb^T                      head tied to the embedding, no bias

Mixer: in_proj -> [gate z | xBC | dt];  xBC -> causal depthwise conv1d -> SiLU -> x, B, C;
dt = softplus(dt + dt_bias), A = -exp(A_log);  SSD scan with the D skip;  out_proj(RMSNorm(y * SiLU(z))).

The mixer is the implicit model's block without its injection (aocsim.nn.ssm_blocks.Mamba2Block with
u = None, plain linear maps without bias): one definition of the block, the scan (aocsim.nn.ssm_scan) and
RMSNorm. One B/C group (n_groups = 1), as that scan has. The math is HuggingFace's Mamba2ForCausalLM
(tests/nn/test_mamba2.py copies its weights in and compares the logits).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from aocsim.errors import InputError
from aocsim.nn.ssm_blocks import Mamba2Block, RMSNorm, SSMConfig, TokenCache, residual_stack, uninitialised


@dataclass(frozen=True)
class Mamba2Config:
    """Architecture: d_inner = expand d_model, heads of `head_dim` channels, `n_groups` B/C groups
    (1 only), a causal conv of `conv_kernel` taps, RMSNorm epsilon `eps` (HuggingFace's default)."""

    vocab_size: int
    d_model: int = 64
    n_layers: int = 2
    d_state: int = 16
    expand: int = 2
    head_dim: int = 16
    n_groups: int = 1
    conv_kernel: int = 4
    eps: float = 1e-5
    implicit: ClassVar[bool] = False  # one pass, no fixed point (read where models of both kinds go)

    def __post_init__(self) -> None:
        if self.n_groups != 1:
            raise InputError(f"Mamba2Config.n_groups = {self.n_groups!r}; only one B/C group (1) is implemented")
        if not (isinstance(self.eps, (int, float)) and not isinstance(self.eps, bool) and self.eps > 0):
            raise InputError(f"Mamba2Config.eps = {self.eps!r}; expected a number > 0")
        self.block_config()  # the integer fields, and head_dim dividing d_inner

    def block_config(self) -> SSMConfig:
        """The block's configuration: an explicit SSM block with plain (not weight-normalised) maps."""
        return SSMConfig(vocab_size=self.vocab_size, d_model=self.d_model, d_state=self.d_state,
                         expand=self.expand, head_dim=self.head_dim, n_layers=self.n_layers,
                         conv_kernel=self.conv_kernel, implicit=False, weight_norm=False)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Mamba2LM(nn.Module):
    """Embedding, `n_layers` residual Mamba2 blocks, final RMSNorm, head tied to the embedding.

    Args:
        config: architecture.
        generator: RNG of the initial weights (default: seed 0); the global RNG is not drawn from.
    """

    def __init__(self, config: Mamba2Config, *, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.config = c = config
        self.embedding = uninitialised(nn.Embedding, c.vocab_size, c.d_model)
        self.blocks = nn.ModuleList([Mamba2Block(c.block_config(), eps=c.eps) for _ in range(c.n_layers)])
        self.final_norm = RMSNorm(c.d_model, c.eps)
        self._init_weights(generator if generator is not None else torch.Generator().manual_seed(0))

    @torch.no_grad()
    def _init_weights(self, gen: torch.Generator) -> None:
        """As the reference mamba_ssm: embedding N(0, 0.02^2); linear maps and the conv U(+-1/sqrt(fan-in)),
        out_proj scaled by 1/sqrt(n_layers); conv bias 0. dt_bias, A_log, D and the norms: the block's."""
        def uniform(t: torch.Tensor, bound: float) -> None:
            t.copy_((torch.rand(t.shape, generator=gen, dtype=torch.float64) * 2 - 1) * bound)

        self.embedding.weight.copy_(torch.randn(self.embedding.weight.shape, generator=gen) * 0.02)
        for block in self.blocks:
            uniform(block.in_proj.weight, block.in_proj.in_features ** -0.5)
            uniform(block.conv_weight, block.cfg.conv_kernel ** -0.5)
            block.conv_bias.zero_()
            uniform(block.out_proj.weight, (block.out_proj.in_features * self.config.n_layers) ** -0.5)

    def check_tokens(self, tokens: Any) -> torch.Tensor:
        """`tokens` as int64 on the model's device, or a one-line InputError."""
        if not isinstance(tokens, torch.Tensor) or tokens.is_floating_point() or tokens.is_complex() \
                or tokens.dtype == torch.bool or tokens.ndim != 2 or 0 in tokens.shape:
            raise InputError(f"tokens must be a non-empty integer tensor [B, L]; got "
                             f"{type(tokens).__name__}{f' {tokens.dtype} {tuple(tokens.shape)}' if isinstance(tokens, torch.Tensor) else ''}")
        lo, hi = int(tokens.min()), int(tokens.max())
        if lo < 0 or hi >= self.config.vocab_size:
            raise InputError(f"token id {lo if lo < 0 else hi} is outside the vocabulary "
                             f"[0, {self.config.vocab_size - 1}]")
        return tokens.long().to(self.embedding.weight.device)

    def head(self, z: torch.Tensor) -> torch.Tensor:
        """Logits of the final hidden states: RMSNorm_f(z) Emb^T."""
        return F.linear(self.final_norm(z), self.embedding.weight)

    def forward(self, tokens: torch.Tensor, *, chunk: int = 64) -> torch.Tensor:
        """Logits [B, L, vocab] of tokens int [B, L] (chunked scan of `chunk` tokens)."""
        return self.head(self.hidden(tokens, chunk=chunk))

    def hidden(self, tokens: torch.Tensor, *, chunk: int = 64) -> torch.Tensor:
        """The last block's hidden states z_n [B, L, d_model] of tokens int [B, L] (the head reads them)."""
        z = self.embedding(self.check_tokens(tokens))
        for block in self.blocks:  # each block called as a module, so that its forward hooks fire
            z = z + block(z, chunk=chunk)
        return z

    def init_caches(self, batch: int) -> list[TokenCache]:
        """The empty recurrent state of every block (conv window and SSM state) for `batch` sequences."""
        return [block.init_cache(batch, self.embedding.weight) for block in self.blocks]

    def step(self, token: torch.Tensor, caches: list[TokenCache]) -> tuple[torch.Tensor, list[TokenCache]]:
        """Recurrent form, one token: token int [B] -> (logits [B, vocab], the caches after it)."""
        z = self.embedding(token.long().to(self.embedding.weight.device))
        z, new = residual_stack(self.blocks, z, None, caches)
        return self.head(z), new

