"""Implicit (and explicit) Mamba2-style state-space models in plain PyTorch.

Schoene et al., "Implicit Language Models are RNNs" (ICML 2025, arXiv 2502.07827):

    u = W_u RMSNorm(Emb(x))                       injection, once per forward, shared by all layers
    f(z): for each block l: z <- z + W_out RMSNorm(y * SiLU(g)), where
          p = W_in RMSNorm(z) + u -> gate g | xBC | delta;  xBC -> causal depthwise conv -> SiLU
          -> x, B, C;  dt = softplus(delta + b_dt);  selective scan (aocsim.nn.ssm_scan) -> y
          then f(z) = RMSNorm_f(z)
    implicit: iterate z = f(z) to a fixed point;  explicit: one pass of f from z = 0.

Two execution modes reach the same fixed point (f is causal): `simultaneous`
(all tokens at once, one chunked parallel scan per iteration) and `sequential`
(token by token: a per-token fixed point with the SSM state and conv buffer of
the previous tokens held fixed, then committed; memory constant in L).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

import torch
from torch import nn

from aocsim.errors import InputError
from aocsim.nn.ssm_blocks import (Mamba2Block, RMSNorm, SSMConfig, TokenCache, _linear, residual_stack,
                                  uninitialised)
from aocsim.nn.ssm_token import OnPass, TokenMap, announce, relative_change
from aocsim.solve.core import solve
from aocsim.solve.solvers import Picard

MODES = ("simultaneous", "sequential")
FREEZE = 0.1


@dataclass(frozen=True)
class SSMOutput:
    """logits [B, L, V]; z [B, L, d_model]; iterations and relative residuals per token [B, L];
    trace (with `trace=True`): the relative residual of every token at every iteration [B, L, I]
    (sequential mode: the iterations of the token's own solve; simultaneous: of the whole
    sequence), NaN where the token was not iterated (stopped, frozen, or not yet reached)."""

    logits: torch.Tensor
    z: torch.Tensor
    iterations: torch.Tensor
    residuals: torch.Tensor
    trace: torch.Tensor | None = None


class ImplicitSSM(nn.Module):
    """Embedding, shared injection, Mamba2 blocks, final norm, linear head.

    Args:
        config: architecture; `implicit=False` gives the explicit baseline.
        generator: RNG of the initial weights.
    """

    def __init__(self, config: SSMConfig, *, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.config = config
        c = config
        self.embedding = uninitialised(nn.Embedding, c.vocab_size, c.d_model)
        self.emb_norm = RMSNorm(c.d_model)
        self.inject = _linear(c.d_model, c.d_in_proj, c.weight_norm)
        self.blocks = nn.ModuleList([Mamba2Block(c) for _ in range(c.n_layers)])
        self.final_norm = RMSNorm(c.d_model)
        self.head = _linear(c.d_model, c.vocab_size, weight_norm=False, bias=True)
        self._init_weights(generator if generator is not None else torch.Generator().manual_seed(0))
    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled as its config, dtype, weights and card (worker processes receive models): torch
        refuses to pickle weight-normalised layers as objects."""
        dtype = self.head.weight.dtype
        return _rebuild, (self.config, dtype, self.state_dict(), getattr(self, "card", None), self.training)

    @torch.no_grad()
    def _init_weights(self, gen: torch.Generator) -> None:
        """Draw every random weight from `gen` (normal, std 1 / sqrt(fan-in); embeddings std 1)."""
        def normal(shape: tuple[int, ...], std: float) -> torch.Tensor:
            return torch.randn(shape, generator=gen) * std

        self.embedding.weight.copy_(normal(self.embedding.weight.shape, 1.0))
        for module in self.modules():
            if isinstance(module, nn.Linear):
                if nn.utils.parametrize.is_parametrized(module, "weight"):
                    v = normal(module.parametrizations.weight.original1.shape, module.in_features ** -0.5)
                    module.parametrizations.weight.original1.copy_(v)
                    module.parametrizations.weight.original0.copy_(torch.linalg.vector_norm(v, dim=1, keepdim=True))
                else:
                    module.weight.copy_(normal(module.weight.shape, module.in_features ** -0.5))
                if module.bias is not None:
                    module.bias.zero_()
            elif isinstance(module, Mamba2Block):
                module.conv_weight.copy_(normal(module.conv_weight.shape, module.cfg.conv_kernel ** -0.5))

    # -- the map --------------------------------------------------------------------------------
    def injection(self, tokens: torch.Tensor) -> torch.Tensor:
        """u = W_u RMSNorm(Emb(tokens)), [B, L, d_in_proj]."""
        return self.inject(self.emb_norm(self.embedding(tokens)))

    def f(self, z: torch.Tensor, u: torch.Tensor, *, chunk: int = 64) -> torch.Tensor:
        return self.f_segment(z, u, chunk=chunk)[0]  # one application of the layer stack to all tokens

    def f_segment(self, z: torch.Tensor, u: torch.Tensor, caches: list[TokenCache] | None = None, *,
                  chunk: int = 64) -> tuple[torch.Tensor, list[TokenCache]]:
        """The stack on a run of tokens after those that `caches` (one per block) summarise."""
        z, new = residual_stack(self.blocks, z, u, caches, chunk=chunk)
        return self.final_norm(z), new

    def f_token(self, z: torch.Tensor, u: torch.Tensor, caches: list[TokenCache]
                ) -> tuple[torch.Tensor, list[TokenCache]]:
        """The stack on one token with the previous tokens' states fixed."""
        z, new = residual_stack(self.blocks, z, u, caches)
        return self.final_norm(z), new

    # -- execution ------------------------------------------------------------------------------
    def check_tokens(self, tokens: Any) -> torch.Tensor:
        v = self.config.vocab_size
        if not isinstance(tokens, torch.Tensor) or tokens.dtype not in (torch.int64, torch.int32, torch.int16,
                                                                         torch.uint8):
            raise InputError(f"tokens must be an integer tensor [B, L]; got {type(tokens).__name__}"
                             + (f" {tokens.dtype}" if isinstance(tokens, torch.Tensor) else ""))
        if tokens.ndim != 2 or tokens.shape[0] == 0 or tokens.shape[1] == 0:
            raise InputError(f"tokens has shape {tuple(tokens.shape)}; expected a non-empty [B, L]")
        lo, hi = int(tokens.min()), int(tokens.max())
        if lo < 0 or hi >= v:
            bad = lo if lo < 0 else hi
            raise InputError(f"token id {bad} is outside the vocabulary [0, {v - 1}]")
        return tokens.long().to(self.head.weight.device)

    def forward(self, tokens: torch.Tensor, *, mode: str = "simultaneous", tau: float = 0.8,
                tol: float = 1e-4, max_iter: int = 100, chunk: int = 16, lookahead: int | None = None,
                trace: bool = False, on_pass: OnPass = None, sequential: Callable[..., Any] | None = None
                ) -> SSMOutput:
        """Run the model without gradients through the solve (inference).

        Args:
            tokens: int [B, L], ids in [0, vocab).
            mode: "simultaneous" or "sequential".
            tau: damping of the iteration z <- (1 - tau) z + tau f(z).
            tol: per-token relative residual ||f(z) - z|| / ||f(z)|| that counts as converged.
            max_iter: iteration cap (per token in sequential mode).
            chunk: scan chunk length (simultaneous mode; 16 is the fastest on CPU at these widths,
                training keeps `f`'s 64).
            lookahead: simultaneous mode: iterate only this many tokens beyond the converged prefix
                (None: all; see `_simultaneous`). Same fixed point, iteration counts within one.
            trace: also return every token's relative residual per iteration (`SSMOutput.trace`).
            on_pass: called as on_pass(positions, visit, rows) before each pass of tokens through the
                maps (`aocsim.nn.ssm_token.OnPass`; a placed model keys its noise by it).
            sequential: runs sequential mode in place of `self.sequential`, called as
                sequential(self, u, ...) with its arguments (a placed model's own token loop,
                aocsim/execute/token_loop.py).
        """
        if mode not in MODES:
            raise InputError(f"mode = {mode!r}; expected one of {list(MODES)}")
        if not 0.0 < tau <= 1.0:
            raise InputError(f"tau = {tau!r}; expected a damping in (0, 1]")
        if not (tol >= 0.0 and isinstance(max_iter, int) and max_iter >= 0):
            raise InputError(f"tol = {tol!r}, max_iter = {max_iter!r}; expected tol >= 0 and an integer max_iter >= 0")
        if lookahead is not None and not (isinstance(lookahead, int) and not isinstance(lookahead, bool)
                                          and lookahead >= 1):
            raise InputError(f"lookahead = {lookahead!r}; expected None or an integer >= 1 (tokens)")
        tokens = self.check_tokens(tokens)
        announce(on_pass, 0, tokens.shape[1], 0)
        u = self.injection(tokens)
        if not self.config.implicit and mode == "simultaneous":  # sequential: token by token (`solve_token`)
            z = self.f(torch.zeros(*tokens.shape, self.config.d_model, dtype=u.dtype, device=u.device), u,
                       chunk=chunk)
            zeros = torch.zeros(tokens.shape, dtype=u.dtype, device=u.device)
            return SSMOutput(self.head(z), z, zeros.long(), zeros, zeros[..., None] if trace else None)
        if mode == "simultaneous":
            z, iters, res, steps = self._simultaneous(u, tau=tau, tol=tol, max_iter=max_iter, chunk=chunk,
                                                      lookahead=lookahead, trace=trace, on_pass=on_pass)
        else:
            run = self.sequential if sequential is None else partial(sequential, self)
            z, iters, res, steps = run(u, tau=tau, tol=tol, max_iter=max_iter, trace=trace, on_pass=on_pass)
        return SSMOutput(self.head(z), z, iters, res, steps)

    @torch.no_grad()
    def predict(self, tokens: torch.Tensor, mode: str = "sequential", **options: Any) -> torch.Tensor:
        """Class ids per position, int64 [B, L]."""
        return self.forward(tokens, mode=mode, **options).logits.argmax(-1)

    def _simultaneous(self, u: torch.Tensor, *, tau: float, tol: float, max_iter: int, chunk: int,
                      lookahead: int | None = None, trace: bool = False, on_pass: OnPass = None):
        """Damped Picard on all tokens at once.

        A token's map value depends only on the tokens up to it, so a prefix on which every sequence
        has converged is frozen: its caches summarise it and later iterations run on the rest only.
        Convergence moves along the sequence at about one token per iteration, so this halves the
        work at long lengths; the frozen tokens keep their converged iterate.

        `lookahead` (None: every token): iterate only that many tokens beyond the frozen prefix; the
        others wait at their start value until the prefix comes within reach. A token cannot converge
        before the tokens it depends on, so this drops work on tokens whose input is still moving
        (docs/STATE_TRACKING.md, evaluation). If the prefix does not move for `lookahead`
        iterations (a map that does not converge to FREEZE x tol), every token iterates from then on.
        """
        b, L, _ = u.shape
        z = u.new_zeros(b, L, self.config.d_model)
        iters = torch.full((b, L), max_iter, dtype=torch.int64, device=u.device)
        done = torch.zeros(b, L, dtype=torch.bool, device=u.device)
        res = torch.full((b, L), float("inf"), dtype=u.dtype, device=u.device)
        front, caches, still = 0, None, 0  # tokens before `front` are frozen; `still`: iterations since it moved
        steps: list[tuple[int, int, torch.Tensor]] = []  # (front, end, residuals) per iteration, with `trace`
        for k in range(max_iter + 1):
            end = L if lookahead is None else min(L, front + lookahead)
            zs, us = z[:, front:end], u[:, front:end]
            announce(on_pass, front, end, k)
            fz, _ = self.f_segment(zs, us, caches, chunk=chunk)
            r = relative_change(fz, zs)
            res[:, front:end] = r
            if trace:
                steps.append((front, end, r))
            ok = r <= tol
            iters[:, front:end] = torch.where(ok & ~done[:, front:end], k, iters[:, front:end])
            done[:, front:end] |= ok
            if bool(done.all()) or k == max_iter:
                break
            n = int((r <= FREEZE * tol).all(0).long().cumprod(0).sum())  # leading tokens converged in every sequence
            if n:
                announce(on_pass, front, front + n, k)  # the same pass as above for these tokens
                _, caches = self.f_segment(zs[:, :n], us[:, :n], caches, chunk=chunk)
                front += n
            still = 0 if n else still + 1
            z[:, front:end] = torch.lerp(z[:, front:end], fz[:, n:], tau)
            if lookahead is not None and still >= lookahead:
                lookahead = None
        if not trace:
            return z, iters, res, None
        out = res.new_full((b, L, len(steps)), float("nan"))
        for k, (start, stop, r) in enumerate(steps):
            out[:, start:stop, k] = r
        return z, iters, res, out

    def sequential(self, u: torch.Tensor, *, tau: float, tol: float, max_iter: int, trace: bool = False,
                   on_pass: OnPass = None, solve_one: Callable[..., tuple[Any, ...]] | None = None):
        """Sequential mode on the injections u [B, L, d_in_proj]: token by token, each token's fixed point
        (`solve_one(u_t, caches, t)`, default `solve_token` with these settings) committed before the
        next. Returns (z [B, L, d], iterations [B, L], relative residuals [B, L], trace [B, L, I] or None)."""
        if solve_one is None:
            solve_one = partial(self.solve_token, tau=tau, tol=tol, max_iter=max_iter, trace=trace, on_pass=on_pass)
        b, L, _ = u.shape
        caches = [block.init_cache(b, u) for block in self.blocks]
        zs, iters, res, steps = [], [], [], []
        for t in range(L):  # the RNN: constant memory in L
            z_t, caches, its, r, seen = solve_one(u[:, t], caches, t)
            zs.append(z_t)
            iters.append(its)
            res.append(r)
            steps.append(seen)
        out = None
        if trace:
            out = u.new_full((b, L, max(s.shape[1] for s in steps)), float("nan"))
            for t, s in enumerate(steps):
                out[:, t, : s.shape[1]] = s
        return torch.stack(zs, 1), torch.stack(iters, 1), torch.stack(res, 1), out

    def solve_token(self, u_t: torch.Tensor, caches: list[TokenCache], t: int = 0, *, tau: float = 0.8,
                    tol: float = 1e-4, max_iter: int = 100, trace: bool = False, on_pass: OnPass = None,
                    map_type: type[TokenMap] = TokenMap):
        """One token of sequential mode: its fixed point with the previous tokens' states `caches` fixed.

        u_t [B, d_in_proj] (the token's injection), caches one per block (`block.init_cache` before the
        first token), t the token's position (for `on_pass`); `map_type`: the token's map (a `TokenMap`
        subclass may evaluate only the rows still iterating, aocsim/execute/token_loop.py). Returns
        (z_t [B, d_model], the caches committed at the fixed point, iterations [B], relative residuals
        [B], the residual per iteration [B, I] with `trace`, else None). An explicit model makes one
        pass from z = 0.
        """
        if not self.config.implicit:
            announce(on_pass, t, t + 1, 0)
            z_t, caches = self.f_token(u_t.new_zeros(u_t.shape[0], self.config.d_model), u_t, caches)
            zeros = u_t.new_zeros(u_t.shape[0])
            return z_t, caches, zeros.long(), zeros, zeros[:, None] if trace else None
        token_map = map_type(self, u_t, caches, t, trace, on_pass)
        result = solve(token_map, u_t.new_zeros(u_t.shape[0], self.config.d_model), solver=Picard(tau), atol=0.0,
                       rtol=tol, max_iter=max_iter, return_best=False)
        steps = None
        if trace:  # evaluations after a row stopped are not its iterations
            r = torch.stack(token_map.seen, 1)
            steps = torch.where(torch.arange(r.shape[1], device=r.device) <= result.iterations[:, None],
                                r, torch.full_like(r, float("nan")))
        # Commit the states at the fixed point: solve returns each row's last iterate
        # (return_best=False), whose caches token_map kept, without a recompute.
        return result.z, token_map.last, result.iterations, result.rel_residual, steps


def _rebuild(config: SSMConfig, dtype: torch.dtype, state: dict[str, torch.Tensor], card: dict[str, Any] | None,
             training: bool) -> ImplicitSSM:
    """An `ImplicitSSM` from its pickled parts (`ImplicitSSM.__reduce__`)."""
    model = ImplicitSSM(config).to(dtype)
    model.load_state_dict(state)
    if card is not None:
        model.card = card
    return model.train(training)
