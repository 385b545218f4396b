"""The rules between placement options (`RULES`): each reads a resolved placement (every group's options,
aocsim/execute/option_groups.py) and returns a one-line message when the placement breaks it. Checked in
one place, when a placement is resolved for a kind (`Placement.resolved`, aocsim/execute/placement.py).
"""

from __future__ import annotations

from typing import Any, Callable


def _states_need_sequential(s: Any) -> str | None:
    # mode None: a kind without modes (a plain Mamba2 model); the wrapper says whether it has the site
    if (s.snr_db is not None and s.snr_kind != "device" and s.snr_site == "states"
            and s.mode not in ("sequential", None)):
        return (f"snr_site = 'states' with mode = {s.mode!r}: the SSM states are committed per token in sequential "
                "mode only; expected mode 'sequential' or snr_site 'inputs'")
    return None


def _state_noise_is_a_second_site(s: Any) -> str | None:
    if s.snr_states_db is None:
        return None
    if s.mode != "sequential":
        return (f"snr_states_db with mode = {s.mode!r}: the SSM states are committed per token in sequential mode "
                "only; expected mode 'sequential'")
    if s.snr_kind == "device" or (s.snr_db is not None and s.snr_site == "states"):
        return (f"snr_states_db with snr_kind = {s.snr_kind!r} and snr_site = {s.snr_site!r}: it is drawn noise on "
                "the states beside snr_db's on the inputs; expected snr_site 'inputs' and snr_kind 'additive' or "
                "'multiplicative'")
    return None


def _device_noise_needs_tiles(s: Any) -> str | None:
    if s.snr_kind == "device" and s.snr_db is not None and s.on_tiles == ():
        return ("snr_kind = 'device' with on_tiles = 'none': no map runs on the device, so its noise cannot be "
                "scaled; expected maps on tiles or snr_kind 'additive' / 'multiplicative'")
    return None


def _reference_ema_needs_sequential(s: Any) -> str | None:
    if s.snr_convention == "elementwise" and s.ema_alpha is not None and s.mode != "sequential":
        return (f"snr_convention = 'elementwise' with ema_alpha and mode = {s.mode!r}: the states are committed from "
                "the EMA value per token, in sequential mode only; expected mode 'sequential' or snr_convention 'rms'")
    return None


def _batch_convergence_needs_sequential(s: Any) -> str | None:
    if s.snr_convergence == "batch" and s.mode != "sequential":
        return (f"snr_convergence = 'batch' with mode = {s.mode!r}: the batch's stop test is per token, in "
                "sequential mode only; expected mode 'sequential' or snr_convergence 'token'")
    return None


def _elementwise_is_drawn_noise(s: Any) -> str | None:
    if s.snr_convention == "elementwise" and s.snr_kind == "device" and s.snr_db is not None:
        return ("snr_convention = 'elementwise' with snr_kind = 'device': a profile's own noise is scaled to a power "
                "ratio at the site, not drawn per element; expected snr_kind 'additive' / 'multiplicative' or "
                "snr_convention 'rms'")
    return None


RULES: tuple[Callable[[Any], str | None], ...] = (
    _states_need_sequential, _state_noise_is_a_second_site, _device_noise_needs_tiles, _reference_ema_needs_sequential,
    _batch_convergence_needs_sequential, _elementwise_is_drawn_noise)
