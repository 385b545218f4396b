"""Noise set by an SNR in dB, and an EMA readout of the implicit iteration (docs/LANGUAGE.md, "Noise set
by an SNR").

The protocol of the AOC group's noise study of implicit language models, as placement options
(aocsim/execute/option_groups.py, `NoiseInjection`: `snr_db`, `snr_site`, `snr_kind`, `ema_alpha`, ...) honoured
by a wrapper around a placed model with noise sites (aocsim/execute/noise_injection.py, `NoiseInjected`). The
parts here attach to the placed model's own model for a run (`attach`, `detach`, `reset`: `PlacedSSM.keyed`) and
may read its output anew (`output`):

- `SiteNoise` draws Gaussian noise at one site of the model: `inputs`, the input of every block's
  input projection (RMSNorm(z), what the block's mixer reads) at every application of the map, or
  `states`, the SSM states (conv window and scan state of every block) committed after each token in
  sequential mode. Additive: x + rms(x) r n; multiplicative: x (1 + r n); r = 10^(-SNR/20) (`ratio`),
  n standard normal, rms(x) over the vector of one token (inputs) or one state tensor of one
  sequence (states). So the power of the drawn noise is the signal's power times 10^(-SNR/10).
- `EmaReadout` reads the iteration as z_read <- alpha z_k + (1 - alpha) z_read over the iterates z_k
  that enter the map (the zero start excluded; alpha 1: the last iterate).

That is the 'rms' convention (`snr_convention`, the default). 'elementwise' is the convention of the
implicit-LM paper's reference code: each element's own std, |x_i| r (additive x + |x| r n;
multiplicative x + x |x| r n), the first token of every sequence noise-free, and with `ema_alpha` the
token's iteration of `ReferenceSolve` (the stop test reads the EMA m of the map's values, one more map
call at m commits the states and gives z = f(m)). `snr_convergence` 'batch': every sequence of the batch
iterates until the batch's relative change is at most rtol (`ReferenceSolve`), as the reference does.

Both are keyed like the device (docs/PHYSICS.md, keyed randomness): the draws of token t of sequence
s at visit v come from the run's key folded with `Stream.SNR`, the site, the block and v, at counter
s L + t; so a run is reproducible from its seed and a sequence draws the same alone or in a batch.
The device side of the mapping (what a profile's own noise measures in dB) is aocsim/execute/snr_mapping.py.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, Sequence

import torch

from aocsim.errors import InputError
from aocsim.execute.token_keys import TokenKeys
from aocsim.execute.placement import NoiseInjection
from aocsim.hardware.engine import keys
from aocsim.hardware.engine.counter_rng import normal_pair
from aocsim.nn.implicit_ssm import ImplicitSSM
from aocsim.nn.ssm_blocks import TokenCache
from aocsim.nn.ssm_token import OnPass, TokenMap, relative_change

SITES = ("inputs", "states")
INPUTS, STATES = 0, 1  # the site's coordinate in the key


def ratio(snr_db: float) -> float:
    """The noise's std relative to the signal's rms at `snr_db` (an amplitude ratio: 10^(-SNR/20))."""
    return 0.0 if snr_db == math.inf else 10.0 ** (-snr_db / 20.0)


def snr_of(signal_power: float, noise_power: float) -> float:
    """10 log10 of a power ratio (the SNR in dB the tallies and the mapping report)."""
    return math.inf if noise_power == 0.0 else 10.0 * math.log10(signal_power / noise_power)


def perturb(x: torch.Tensor, normal: torch.Tensor, snr_db: float, kind: str, convention: str = "rms") -> torch.Tensor:
    """x [S, N] (S samples of N values) with noise `normal` [S, N] (standard normal) at `snr_db`.
    Convention 'rms': additive x + rms(x) r n, rms over each sample's N values, or multiplicative
    x (1 + r n); 'elementwise' (the reference code's): additive x + |x| r n, each element's own std,
    or multiplicative x + x |x| r n."""
    r = ratio(snr_db)
    if r == 0.0:
        return x  # no noise: exactly the input
    if convention == "elementwise":
        if kind not in ("additive", "multiplicative"):
            raise InputError(f"snr_kind = {kind!r}; expected 'additive' or 'multiplicative' for drawn noise")
        sigma = x.abs() * r  # per element: 0 dB is noise as large as each value
        return x + (sigma if kind == "additive" else x * sigma) * normal
    if kind == "additive":
        return x + x.square().mean(-1, keepdim=True).sqrt() * (r * normal)
    if kind == "multiplicative":
        return x + x * (r * normal)
    raise InputError(f"snr_kind = {kind!r}; expected 'additive' or 'multiplicative' for drawn noise")


class Part:
    """What every part of a run shares: the output read as the model gave it (`output`), the states
    committed after each token as they are (`commit`), and no token iteration of its own (`solves_tokens`:
    a part that has one is called as `ImplicitSSM.solve_token`; aocsim/execute/token_loop.py)."""

    solves_tokens = False
    token_keys: TokenKeys | None = None  # set by the keyed run (PlacedSSM.keyed)
    hooks: Sequence[Any] = ()  # the forward hooks `attach` registered (each part assigns its own list)

    def attach(self, model: ImplicitSSM) -> None:
        """Attach to the placed model's own model for a run (its forward hooks)."""

    def detach(self, model: ImplicitSSM) -> None:
        """Undo `attach`: remove its hooks."""
        for hook in self.hooks:
            hook.remove()
        self.hooks = []

    def output(self, out: Any, model: Any) -> Any:
        """The run's output as this part reads it (the model's own, unless it reads another z)."""
        return out

    def commit(self, caches: list[TokenCache], t: int) -> list[TokenCache]:
        """Sequential mode: the states committed after token t, as the next token sees them."""
        return caches


class SiteNoise(Part):
    """Noise at one site of a placed model (module docstring); `signal` and `noise` tally the sums of
    squares of what it perturbed and of what it added (their ratio: the SNR drawn, `measured_db`)."""

    def __init__(self, site: str, snr_db: float, kind: str, convention: str = "rms") -> None:
        self.site, self.snr_db, self.kind, self.convention = site, snr_db, kind, convention
        self.key: keys.Key | None = None
        self.signal = self.noise = 0.0

    def reset(self, generator: keys.Seed) -> None:
        self.key = keys.as_key(generator)

    @property
    def measured_db(self) -> float:
        return snr_of(self.signal, self.noise)

    def attach(self, model: ImplicitSSM) -> None:
        if self.site == "inputs":
            self.hooks = [block.in_proj.register_forward_pre_hook(partial(self._inputs, i))
                          for i, block in enumerate(model.blocks)]

    def commit(self, caches: list[TokenCache], t: int) -> list[TokenCache]:
        return self._states(caches, t) if self.site == "states" else caches

    def _draw(self, x: torch.Tensor, samples: torch.Tensor, *coordinates: int) -> torch.Tensor:
        """x [S, N] of the samples' counters [S], perturbed with the draws of key.fold(*coordinates)."""
        if self.key is None or self.token_keys is None:
            raise RuntimeError("SiteNoise used outside a keyed run (PlacedSSM.keyed): no noise key")
        key = self.key.fold(*coordinates).tensor(x.device)
        normal, _ = normal_pair(key, keys.sample_counters(samples.to(x.device), x.shape[-1]), x.dtype)
        noisy = perturb(x, normal, self.snr_db, self.kind, self.convention)
        if self.convention == "elementwise":  # the first token of every sequence noise-free (the reference's)
            later = (samples.to(x.device) % self.token_keys.length != 0)[:, None]
            noisy = torch.where(later, noisy, x)
            self.signal += float((x.double().square() * later).sum())
        else:
            self.signal += float(x.double().square().sum())
        self.noise += float((noisy - x).double().square().sum())
        return noisy

    def _inputs(self, block: int, _module: Any, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        x = args[0]
        rows = self.token_keys
        samples = rows.samples(tuple(x.shape[:-1]))
        noisy = self._draw(x.reshape(-1, x.shape[-1]), samples, INPUTS, block, rows.pass_visit("noise set by an SNR"))
        return (noisy.reshape(x.shape), *args[1:])

    def _states(self, caches: list[TokenCache], t: int) -> list[TokenCache]:
        rows = self.token_keys
        samples = rows.sequences.long() * rows.length + t
        out = []
        for block, cache in enumerate(caches):
            conv, ssm = (self._draw(part.reshape(part.shape[0], -1), samples, STATES, block, j).reshape(part.shape)
                         for j, part in enumerate((cache.conv, cache.ssm)))
            out.append(TokenCache(conv, ssm))
        return out


class EmaReadout(Part):
    """z_read <- alpha z_k + (1 - alpha) z_read over the iterates entering the map (module docstring).

    Seen at the input of the first block's norm, per token (positions from the pass hook): an input
    equal to the token's previous one (a stopped row evaluated on with its batch, a frozen prefix's
    extra pass) or to the zero start is not an iterate and leaves the EMA as it is."""

    def __init__(self, alpha: float) -> None:
        self.alpha = alpha
        self.read: torch.Tensor | None = None  # [B, L, d]
        self.last: torch.Tensor | None = None

    def reset(self, generator: keys.Seed = None) -> None:
        self.read = self.last = None

    def attach(self, model: ImplicitSSM) -> None:
        self.hooks = [model.blocks[0].norm.register_forward_pre_hook(self._see)]

    def _see(self, _module: Any, args: tuple[torch.Tensor, ...]) -> None:
        rows = self.token_keys
        z = args[0]
        rows.pass_visit("the EMA readout")  # it reads each pass's positions for all its rows
        batch, positions = rows.batch_rows().to(z.device), rows.positions.to(z.device)
        z3 = z.reshape(batch.numel(), positions.numel(), z.shape[-1])
        if self.read is None:
            self.read = z.new_full((len(rows.sequences), rows.length, z.shape[-1]), float("nan"))
            self.last = self.read.clone()
        at = (batch[:, None], positions[None, :])
        before = self.last[at]
        step = ((z3 != before).any(-1) & (z3 != 0).any(-1))[..., None]
        old = self.read[at]
        fresh = torch.where(torch.isnan(old), z3, torch.lerp(old, z3, self.alpha) if self.alpha < 1.0 else z3)
        self.read[at] = torch.where(step, fresh, old)
        self.last[at] = z3

    def z(self, z: torch.Tensor) -> torch.Tensor:
        """The read state [B, L, d]: the EMA where a token had iterates, else the model's own z."""
        if self.read is None:
            return z
        return torch.where(torch.isnan(self.read), z, self.read)

    def output(self, out: Any, model: Any) -> Any:
        """The model's output with z (and the logits) read through the EMA."""
        if self.read is None:
            return out
        z = self.z(out.z)
        return type(out)(model.head(z), z, out.iterations, out.residuals, out.trace)


class ReferenceSolve(Part):
    """A token's iteration in sequential mode as the reference code runs it (the placed model's token loop
    calls it in place of `ImplicitSSM.solve_token`, aocsim/execute/token_loop.py; docs/LANGUAGE.md, the
    two conventions): damped Picard z <- (1 - tau) z + tau f(z) from z = 0, and

    - with `alpha` (snr_convention 'elementwise' with ema_alpha): the EMA m <- (1 - alpha) m + alpha f(z)
      from m = 0 (the zero start); the stop test reads m (relative change ||m_k - m_{k-1}|| / ||m_k||),
      and after the loop one more map call at m commits its states and gives the token's z = f(m)
      (its pass counted in the token's iterations); `read` [B, L, d] keeps m per token;
    - without: the stop test reads ||f(z) - z|| / ||f(z)|| and the last iterate's states are committed,
      as `ImplicitSSM.solve_token` does;
    - `batch` (snr_convergence 'batch'): every sequence iterates until the relative change over the
      whole batch (norms over all its rows) is at most tol; each row's residual reports the batch's.
      Else each row stops at its own.
    """

    solves_tokens = True

    def __init__(self, alpha: float | None, batch: bool) -> None:
        self.alpha, self.batch = alpha, batch
        self.read: torch.Tensor | None = None

    def reset(self, generator: keys.Seed = None) -> None:
        self.read = None

    def __call__(self, model: ImplicitSSM, u_t: torch.Tensor, caches: list[TokenCache], t: int, *, tau: float,
                 tol: float, max_iter: int, trace: bool = False, on_pass: OnPass = None,
                 map_type: type[TokenMap] = TokenMap) -> tuple[Any, ...]:
        token_map = map_type(model, u_t, caches, t, False, on_pass)
        b, d = u_t.shape[0], model.config.d_model
        z = u_t.new_zeros(b, d)
        m = None if self.alpha is None else z.clone()
        active = torch.ones(b, dtype=torch.bool, device=z.device)
        iterations = torch.full((b,), max_iter, dtype=torch.int64, device=z.device)
        residuals = torch.full((b,), float("inf"), dtype=z.dtype, device=z.device)
        seen = []
        for k in range(max_iter + 1):
            index = None if bool(active.all()) else active.nonzero().squeeze(1)
            fz = token_map.evaluate(z, None) if index is None else z.index_copy(0, index, token_map.evaluate(z[index], index))
            new, old = (fz, z) if m is None else (torch.lerp(m, fz, self.alpha), m)
            if self.batch:  # one test for the batch (every row active until it passes)
                change = torch.linalg.vector_norm(new - old) / torch.linalg.vector_norm(new).clamp_min(1e-30)
                r = change.expand(b)
            else:
                r = relative_change(new, old)
            residuals = torch.where(active, r, residuals)
            seen.append(torch.where(active, r, torch.full_like(r, float("nan"))))
            if m is not None:
                m = torch.where(active[:, None], new, m)
            stop = active & (r <= tol)
            iterations = torch.where(stop, k, iterations)
            active = active & ~stop
            if k == max_iter or not bool(active.any()):
                break
            z = torch.where(active[:, None], torch.lerp(z, fz, tau), z)
        if m is not None:  # the states committed from m (all rows: one more pass of the map)
            z = token_map.evaluate(m, None)
            iterations = iterations + 1
            self._keep(m, t)
        return z, token_map.last, iterations, residuals, torch.stack(seen, 1) if trace else None

    def _keep(self, m: torch.Tensor, t: int) -> None:
        rows = self.token_keys
        if self.read is None:
            self.read = m.new_full((len(rows.sequences), rows.length, m.shape[-1]), float("nan"))
        self.read[:, t] = m


def parts_for(noise: NoiseInjection) -> list[Any]:
    """The noise, readout and token iteration a resolved placement's noise options ask for (none when
    they are off, or at their defaults)."""
    s = noise
    parts: list[Any] = []
    reference_ema = s.ema_alpha is not None and s.snr_convention == "elementwise"
    if s.snr_db is not None and s.snr_kind != "device":  # its rules: aocsim/execute/option_rules.py
        parts.append(SiteNoise(s.snr_site, s.snr_db, s.snr_kind, s.snr_convention or "rms"))
    if s.snr_states_db is not None:  # a second site, its own dB (its rules: option_rules.RULES)
        parts.append(SiteNoise("states", s.snr_states_db, s.snr_kind or "additive", s.snr_convention or "rms"))
    if s.ema_alpha is not None and not reference_ema:
        parts.append(EmaReadout(s.ema_alpha))
    if reference_ema or s.snr_convergence == "batch":
        parts.append(ReferenceSolve(s.ema_alpha if reference_ema else None, s.snr_convergence == "batch"))
    return parts

