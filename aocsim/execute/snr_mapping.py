"""A device's own noise in dB at the SNR protocol's sites, and the profile that puts it at a given dB
(docs/LANGUAGE.md, "Noise set by an SNR": the mapping).

The abstract noise (aocsim/execute/snr.py) draws, at its site, noise of power 10^(-SNR/10) times
the signal's. A device draws its noise elsewhere (each tile pass, the analog functions), so its SNR
at a site is measured as the noise that one step of the device puts there, against the exact
path's signal there, from the exact path's state before the step:

- `inputs`: from the exact fixed point z* of token t (previous tokens' states exact), one damped
  application z' = (1 - tau) z* + tau f_dev(z*); the site's value is the first block's
  RMSNorm(z'), the input of its input projection at the next application.
- `states`: from the exact states after token t - 1, the device solves token t (its injection on
  the device too); the site's value is every block's committed conv window and scan state.

Noise power: half the mean square difference of the site's values under two independent draws of
the same weight load (so the load's static errors, which are not noise, cancel); signal power:
the exact path's mean square there; SNR = 10 log10(signal / noise) over all samples and tokens
(`snr_of`). `device_multiplier` scales the profile's `noise.multiplier` (the std of every
per-iteration source) so that this measures the target: x dB on a profile is then the same power
ratio at the same site as x dB of the abstract model. The measurement is the placed kind's own
(`PlacedModel.noise_db`: an implicit SSM's is `device_snr_db`); noise injection
(aocsim/execute/noise_injection.py) asks for the multiplier once per chip and runs on the profile it gives.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

from aocsim.errors import InputError
from aocsim.execute.placement import Placement
from aocsim.execute.snr import parts_for, snr_of
from aocsim.execute.ssm_device import MapProgram, place_ssm
from aocsim.hardware.engine import keys
from aocsim.hardware.profiles.profile import DeviceProfile
from aocsim.nn.implicit_ssm import ImplicitSSM
from aocsim.nn.ssm_blocks import TokenCache

SEQUENCES = 8  # calibration sequences the measurement runs (enough for about 0.1 dB of sampling error)
TOLERANCE_DB = 0.25  # the scaled multiplier's measured SNR within this of the target, else one more step
STEPS = 3


def _flat(caches: list[TokenCache]) -> torch.Tensor:
    return torch.cat([torch.cat([c.conv.flatten(1), c.ssm.flatten(1)], 1) for c in caches], 1)


@torch.no_grad()
def _exact_tokens(model: ImplicitSSM, tokens: torch.Tensor, tau: float) -> list[tuple[Any, ...]]:
    """Per token t: (the states before it, its fixed point z*, the states committed after it) on the
    exact path (sequential mode; relative tolerance 1e-10 in float64, 1e-5 in float32: its digits)."""
    u = model.injection(tokens)
    tol = 1e-10 if u.dtype == torch.float64 else 1e-5
    caches = [block.init_cache(tokens.shape[0], u) for block in model.blocks]
    out = []
    for t in range(tokens.shape[1]):
        z, after, *_ = model.solve_token(u[:, t], caches, t, tau=tau, tol=tol, max_iter=300)
        out.append((caches, z, after))
        caches = after
    return out


@torch.no_grad()
def device_snr_db(model: ImplicitSSM, profile: DeviceProfile, calibration: dict[str, torch.Tensor],
                  placement: Placement, tokens: torch.Tensor, site: str, *, seed: int = 0,
                  programs: dict[str, MapProgram] | None = None) -> float:
    """The SNR in dB of the noise at `site` for `model` placed on `profile` as the resolved `placement`
    says (module docstring), on `tokens` [B, L] (the first SEQUENCES), with weight load `seed`: the
    profile's own noise, and the noise the placement's snr_* options draw where set (on the abstract
    model, the measurement reads the dB set: tests/execute/test_snr_noise.py)."""
    tokens = model.check_tokens(tokens)[:SEQUENCES]
    b, length = tokens.shape
    tau = placement.damping
    exact = _exact_tokens(model, tokens, tau)
    root = keys.as_key(seed).fold(keys.Stream.LOAD)
    placed = place_ssm(model, profile, calibration, placement, generator=root, programs=programs)
    cap = placement.max_iter or 30
    values = []
    for draw in (1, 2):  # two independent draws of the same load
        seen = []
        run = keys.as_key(seed).fold(keys.Stream.RUN, draw)
        with placed.keyed(run, torch.arange(b), length, tuple(parts_for(placement.noise)),
                          run.fold(keys.Stream.SNR)) as keyed:
            m = keyed.model
            keyed.one_pass(length)
            u = m.injection(tokens)
            for t, (before, z, _after) in enumerate(exact):
                if site == "inputs":
                    keyed.on_pass(torch.tensor([t]), 1, None)
                    fz, _ = m.f_token(z, u[:, t], before)
                    seen.append(m.blocks[0].norm(torch.lerp(z, fz, tau)))
                else:
                    _z, committed, *_ = keyed.loop.token(m, u[:, t], before, t, tau=tau, tol=placement.rtol,
                                                         max_iter=cap, on_pass=keyed.on_pass)
                    seen.append(_flat(committed))
        values.append(torch.stack(seen, 1).double())
    if site == "inputs":
        signal = torch.stack([model.blocks[0].norm(z) for _b, z, _a in exact], 1).double()
    else:
        signal = torch.stack([_flat(after) for _b, _z, after in exact], 1).double()
    noise = float((values[0] - values[1]).square().sum()) / 2.0
    return snr_of(float(signal.square().sum()), noise)


def device_multiplier(noise_db: Callable[[DeviceProfile], float], profile: DeviceProfile, target: float,
                      site: str) -> tuple[float, float, float]:
    """(noise.multiplier, the SNR it measures, the profile's own SNR) that put `profile`'s noise at
    `target` dB at `site`, `noise_db` measuring a variant of `profile` there: the std of the noise taken
    as proportional to the multiplier (m <- m 10^((measured - target) / 20)), re-measured up to STEPS
    times until within TOLERANCE_DB (converters and static errors do not scale; a one-line error if the
    target is not reached)."""
    base = float(profile.parts.noise.multiplier)
    if base <= 0.0:
        raise InputError(f"snr_kind = 'device' on {profile.name}: noise.multiplier = {base}; expected a profile with "
                         "per-iteration noise to scale")

    def measure(m: float) -> float:
        return noise_db(profile.with_overrides({"noise.multiplier": m}))

    own = measured = measure(base)
    if target == math.inf:
        return 0.0, math.inf, own
    m = base
    for _ in range(STEPS):
        if abs(measured - target) <= TOLERANCE_DB:
            return m, measured, own
        m *= 10.0 ** ((measured - target) / 20.0)
        measured = measure(m)
    if abs(measured - target) > TOLERANCE_DB:
        raise InputError(f"snr_db = {target} at snr_site {site!r} on {profile.name}: noise.multiplier {m:.4g} measures "
                         f"{measured:.2f} dB (the profile's own noise: {own:.2f} dB); expected a target the "
                         "per-iteration noise can reach (not above the converters' and static floor)")
    return m, measured, own
