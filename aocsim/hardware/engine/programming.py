"""Programming a weight matrix onto the SLM, and the chip's static draws.

Static effects are drawn once, from keyed streams (`aocsim.hardware.engine.keys`):
- per chip and tile (key: the profile's `variation.chip_seed`): fixed-pattern
  variation of the calibrated arrays, each detector's dark current, and each
  emitter's LED cubic;
- per weight load and tile (key: the loop's seed or generator): the SLM
  programming error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from aocsim.errors import InputError
from aocsim.hardware.physics import components as C, temperature
from aocsim.hardware.engine import keys
from aocsim.hardware.engine.memo import Memo
from aocsim.hardware.physics.sources import dark_offset_units
from aocsim.hardware.profiles.parts import Drift, Parts, Slm

# Calibrated per-channel arrays that chip-to-chip variation perturbs.
VARIED_KEYS = (
    "emitter.fan_in_pos", "emitter.fan_in_neg", "slm.distortion_pos", "slm.distortion_neg",
    "detector.output_pos", "detector.output_neg", "crosstalk.pd.later_pos", "crosstalk.pd.later_neg",
    "crosstalk.pd.earlier_pos", "crosstalk.pd.earlier_neg", "crosstalk.pbs.negative_to_positive",
    "crosstalk.pbs.positive_to_negative", "closed_loop.scaling",
)


def chip_key(parts: Parts) -> keys.Key:
    """The root of the chip's streams (`variation.chip_seed`; `keys.chip_root`)."""
    return keys.chip_root(parts.variation.chip_seed)


MEMO_SIZE = 512  # chip x tile x size entries of static draws kept (a few kB each)


def _cached(build: Callable[..., Any]) -> Callable[..., Any]:
    """`build(parts, n, dtype=, device=, tile=)` memoised (aocsim/hardware/engine/memo.py, in memory) on the
    device's components (all of them, so that no edit of a profile can meet a stale entry): a chip's static
    draws are made once however many weight loads (tiles, fits, seeds) it takes. Callers do not change
    the tensors returned."""
    memo: Memo[Any] = Memo(build.__name__.strip("_"), MEMO_SIZE)

    def cached(parts: Parts, n: int, *, dtype: torch.dtype, device: torch.device | str, tile: int = 0) -> Any:
        return memo((parts, n, dtype, torch.device(device), tile),
                    lambda: build(parts, n, dtype=dtype, device=device, tile=tile))

    cached.__doc__ = build.__doc__
    return cached


def _channel_arrays(parts: Parts, n: int, *, dtype: torch.dtype, device: torch.device, tile: int = 0) -> Parts:
    """The device's components with every per-channel array (`PER_CHANNEL`) a tensor of size n, perturbed
    for the chip when variation is on (None stays None).

    Variation multiplies every entry of each array in VARIED_KEYS by (1 + s n_ij), n_ij standard
    normal from the chip's stream (one sub-stream per array).
    """
    from aocsim.hardware.profiles.schema import BY_KEY, PER_CHANNEL

    s = parts.variation.relative_std if parts.variation.enabled else 0.0
    key = chip_key(parts).fold(keys.Stream.VARIATION, tile)

    def on_chip(key_name: str, raw: Any) -> torch.Tensor | None:
        if raw is None:
            return None
        shape = BY_KEY[key_name].shape or ()
        arr = torch.tensor(np.array(raw, dtype=np.float64), device=device)
        arr = arr.expand(n, *shape[1:]) if arr.ndim < len(shape) else arr
        if s > 0 and key_name in VARIED_KEYS:
            draw = keys.normals(key.fold(VARIED_KEYS.index(key_name)), tuple(arr.shape), dtype=torch.float64,
                                device=device)
            arr = arr * (1.0 + s * draw)
        return arr.to(dtype=dtype).contiguous()

    return parts.map_leaves(PER_CHANNEL, on_chip)


def _dark_offsets(parts: Parts, n: int, *, dtype: torch.dtype, device: torch.device,
                  tile: int = 0) -> torch.Tensor | None:
    """Each detector's dark current in detector units, [2N] = [P path; Q path]; None when off.

    I_dark (1 + spread n), n standard normal per detector from the chip's stream, clamped at 0.
    """
    mean = dark_offset_units(parts.noise)
    if mean == 0.0:
        return None
    draw = keys.normals(chip_key(parts).fold(keys.Stream.DARK, tile), (2 * n,), dtype=torch.float64, device=device)
    return (mean * (1.0 + parts.noise.dark.relative_spread * draw)).clamp_min(0.0).to(dtype)


def _emitter_cubics(parts: Parts, n: int, *, dtype: torch.dtype, device: torch.device,
                    tile: int = 0) -> torch.Tensor:
    """Each emitter's two LED cubics, [2, 4, n] (path +/-, power highest first, emitter).

    The profile's cubics with each emitter's t^3 and t^2 coefficients, per path, times (1 + s n),
    s = `emitter.cubic_spread`, n standard normal from the chip's stream (EMITTER, tile); the linear
    and constant terms stay (an emitter's efficiency spread is the fan-in arrays' variation). The chip's
    temperature since its emitters were measured moves the same two coefficients by
    `temperature.led_shape` (skipped where it is 1).
    """
    nominal = torch.tensor(np.array([parts.emitter.poly_pos, parts.emitter.poly_neg], dtype=np.float64),
                           device=device)
    cubics = nominal[:, :, None].expand(2, 4, n)
    s = parts.emitter.cubic_spread
    if s > 0:
        draw = keys.normals(chip_key(parts).fold(keys.Stream.EMITTER, tile), (2, 2, n), dtype=torch.float64,
                            device=device)
        cubics = torch.cat([cubics[:, :2] * (1.0 + s * draw), cubics[:, 2:]], dim=1)
    warm = temperature.led_shape(parts.environment)
    if warm != 1.0:
        cubics = torch.cat([cubics[:, :2] * warm, cubics[:, 2:]], dim=1)
    return cubics.to(dtype).contiguous()


channel_arrays = _cached(_channel_arrays)
dark_offsets = _cached(_dark_offsets)
emitter_cubics = _cached(_emitter_cubics)
CUBIC_DRIFT = 1  # under Stream.DRIFT: the emitters' cubic step (the gain and offset step folds nothing more)


def drift_cubics(drift: Drift, cubics: torch.Tensor, key: keys.Key | None) -> torch.Tensor | None:
    """Each emitter's cubics [2, 4, n] one inference later: the t^3 and t^2 coefficients, per path, times
    (1 + c n), c = `drift.cubic_std_per_inference`, n standard normal from key.fold(DRIFT, CUBIC_DRIFT): a
    relative random walk away from what predistortion measured (docs/PHYSICS.md section 3). None when c
    is 0 or drift is off (nothing drawn)."""
    c = float(drift.cubic_std_per_inference)
    if not drift.enabled or c == 0.0:
        return None
    if key is None:
        raise InputError(f"generator = None; the emitters' cubics drift (drift.cubic_std_per_inference = {c:g}), "
                         "so expected a seed, torch.Generator or Key")
    step = keys.normals(key.fold(keys.Stream.DRIFT, CUBIC_DRIFT), (2, 2, cubics.shape[-1]), dtype=cubics.dtype,
                        device=cubics.device)
    return torch.cat([cubics[:, :2] * (1.0 + c * step), cubics[:, 2:]], dim=1)


@dataclass(frozen=True)
class Programmed:
    """What the SLM holds: normalised sign matrices after quantisation and programming error.

    w_pos, w_neg: [M, K] in [0, 1 + error]; scale: m = max |W| (the normalisation);
    error: the static programming error added to W/m (None when off).
    """

    w_pos: torch.Tensor
    w_neg: torch.Tensor
    scale: torch.Tensor
    error: torch.Tensor | None


def programming_error_std(slm: Slm) -> float:
    """std of the programming error in units of W / m: sigma levels of the b-bit grid (9 bits when unset)."""
    bits = slm.bits if slm.bits is not None else 9
    return slm.programming_error_levels / (2 ** (bits - 1) - 1)


def program_slm(slm: Slm, weight: torch.Tensor, key: keys.Key | None, *, tile: int = 0
                ) -> Programmed:
    """Normalise by max |W|, quantise (straight-through), add the static programming error, split by sign."""
    m = weight.abs().max()
    m = torch.where(m > 0, m, torch.ones_like(m))
    w = C.quantize_signed(weight / m, slm.bits)
    error = None
    if slm.programming_error_levels > 0:
        if key is None:
            raise InputError("generator is required: the profile draws a static SLM programming error "
                             f"(slm.programming_error_levels = {slm.programming_error_levels})")
        draw = keys.normals(key.fold(keys.Stream.PROGRAMMING, tile), tuple(w.shape), dtype=w.dtype, device=w.device)
        error = programming_error_std(slm) * draw
        w = w + error
    return Programmed(torch.relu(w), torch.relu(-w), m, error)
