"""The selective diagonal SSM scan of Mamba2, two ways with identical semantics.

Per head h (P channels each) and state size N, with a_t = exp(dt_t A_h):

    H_t = a_t H_{t-1} + dt_t x_t B_t^T          H_t: [P, N]
    y_t = H_t C_t + D_h x_t

Shapes: x [B, L, H, P], dt [B, L, H] (after softplus), A [H] (negative),
Bm, Cm [B, L, N] (one group), D [H], state [B, H, P, N].

- `chunked_scan`: the chunked parallel form (quadratic inside a chunk of Q
  tokens, recurrent across chunks), memory bounded in Q, not in L.
- `scan_step`: one token, for sequential (RNN) execution.
"""

from __future__ import annotations

import torch


def scan_step(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, Bm: torch.Tensor, Cm: torch.Tensor,
              D: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One token: x [B, H, P], dt [B, H], Bm, Cm [B, N], state [B, H, P, N] -> (y [B, H, P], new state)."""
    a = torch.exp(dt * A)  # [B, H]
    state = a[..., None, None] * state + (dt[..., None] * x)[..., None] * Bm[:, None, None, :]
    y = torch.einsum("bhpn,bn->bhp", state, Cm) + D[:, None] * x
    return y, state


def chunked_scan(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, Bm: torch.Tensor, Cm: torch.Tensor,
                 D: torch.Tensor, state: torch.Tensor | None = None, *, chunk: int = 64
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunked parallel scan (the SSD algorithm of Mamba2). Returns (y [B, L, H, P], final state).

    Inside a chunk, with s_t = sum_{tau <= t} dt_tau A (cumulative log decay):
        y_t = sum_{tau <= t} exp(s_t - s_tau) (C_t . B_tau) dt_tau x_tau + exp(s_t) H_prev C_t + D x_t
        H_end = exp(s_Q) H_prev + sum_tau exp(s_Q - s_tau) dt_tau x_tau B_tau^T
    """
    b, L, h, p = x.shape
    n = Bm.shape[-1]
    if state is None:
        state = x.new_zeros(b, h, p, n)
    ys = []
    for start in range(0, L, chunk):  # memory O(B Q^2 H), independent of L
        sl = slice(start, min(start + chunk, L))
        xc, dtc, bc, cc = x[:, sl], dt[:, sl], Bm[:, sl], Cm[:, sl]
        q = xc.shape[1]
        s = torch.cumsum(dtc * A, dim=1)  # [B, Q, H]
        causal = torch.ones(q, q, dtype=torch.bool, device=x.device).tril()
        gap = s[:, :, None, :] - s[:, None, :, :]  # [B, Q(t), Q(tau), H]
        decay = torch.exp(torch.where(causal[None, :, :, None], gap, torch.full_like(gap, -torch.inf)))
        cb = torch.einsum("btn,bsn->bts", cc, bc)  # [B, Q, Q]
        weights = decay * cb[..., None] * dtc[:, None, :, :]  # [B, t, tau, H]
        y = torch.einsum("btsh,bshp->bthp", weights, xc)
        y = y + torch.exp(s)[..., None] * torch.einsum("btn,bhpn->bthp", cc, state)
        ys.append(y + D[:, None] * xc)
        tail = torch.exp(s[:, -1:, :] - s) * dtc  # [B, Q, H]: weight of each token in the end state
        state = torch.exp(s[:, -1])[..., None, None] * state + torch.einsum("bsh,bshp,bsn->bhpn", tail, xc, bc)
    return torch.cat(ys, dim=1), state
