"""The machine a tiled product runs on (docs/PHYSICS.md section 6).

A machine of optical modules of N channels each. Weight-stationary (one module per tile) holds every
tile for good, and all tiles of a product run at once: `passes` passes per product at the converters'
pace (aocsim/hardware/physics/converters.py). Time-multiplexed (fewer modules than tiles): the tiles run
in waves of as many tiles as modules, and every tile is written onto its module again for each product
(a weight load: `slm.reload_time_s` and `energy.slm_reload_energy_j`; a wave's tiles at once), with a new
programming error drawn from key.fold(RELOAD, call) of the call's key; a load serves one product of the
samples run together, and they share it (`TiledMatrix.load_activity`).
"""

from __future__ import annotations

from dataclasses import dataclass

from aocsim.errors import InputError
from aocsim.hardware.physics.converters import pass_time_s, product_latency_s
from aocsim.hardware.profiles.profile import DeviceProfile


def machine_words(profile: DeviceProfile, modules: int | None) -> str:
    """What a product's time counts on the machine of `modules` (None: one per tile), in words."""
    v = profile.parts
    paced = f"{pass_time_s(v) * 1e9:.3g} ns per pass (the converters' pace; a round trip is " \
            f"{float(v.loop.round_trip_s) * 1e9:.3g} ns), {product_latency_s(v) * 1e9:.3g} ns of conversion and " \
            "digital latency per product"
    if modules is None:
        return f"on one module per tile (weight-stationary): all tiles at once, {paced}"
    reload = float(v.slm.reload_time_s)
    return (f"on {modules} module{'s' * (modules > 1)} (time-multiplexed where it has more tiles: every product "
            f"writes each tile again, {reload:g} s per weight load, then waves of {modules} tiles, {paced})")


def waves(tiles: int, size: int) -> list[int]:
    """The tiles of each wave when `size` modules run `tiles` tiles (the last wave may be short)."""
    return [min(size, tiles - start) for start in range(0, tiles, size)]


def wave_time_s(tiles: int, passes: int, pass_s: float, reload_s: float) -> float:
    """One wave: its `tiles` written onto their modules at once (each module its own SLM drivers: one
    `reload_s`; 0 where they are held), then `passes` passes of `pass_s` (`pass_time_s`) with all of them
    at once."""
    return (reload_s if tiles else 0.0) + passes * pass_s


@dataclass(frozen=True)
class Mount:
    """Where a matrix's tiles sit on the machine's modules (module docstring).

    Weight-stationary (multiplexed False): tile i held for good on module first + i (a model's maps
    take consecutive modules, each with its own fixed pattern). Time-multiplexed: tile i written onto
    module (first + i) mod count before every product (`count` modules shared by the model's maps).
    """

    first: int = 0
    count: int = 1
    multiplexed: bool = False

    def __post_init__(self) -> None:
        for name in ("first", "count"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "first" else 1):
                raise InputError(f"Mount.{name} = {value!r}; expected an integer >= {0 if name == 'first' else 1}")

    def module(self, tile: int) -> int:
        return (self.first + tile) % self.count if self.multiplexed else self.first + tile
