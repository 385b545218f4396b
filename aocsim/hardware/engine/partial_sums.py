"""Analog partial sums of a tiled product and their holds (docs/PHYSICS.md sections 3 and 6).

With partial_sums="analog" the cols partials of a tile row are added in analog before one ADC conversion
per output (`TiledMatrix.__call__`). The running sum is sampled onto a hold capacitor
(`aocsim.hardware.physics.hold.Hold`: kT/C noise and charge injection per sampling, leakage while held)
after each wave of tiles that adds to it:

- weight-stationary (one wave: every tile at once): the row's partials meet at the summing node and are
  sampled once before the ADC, one kT/C and one injection per output and pass; no leakage (nothing waits);
- time-multiplexed (waves of `wave` tiles, tile i in wave i // wave): after each wave that holds some of
  the row's tiles the running sum is sampled (one kT/C, one injection) and held until the next wave adds to it: that
  wave's tiles are written onto their modules at once (one `slm.reload_time_s`, as
  `TiledMatrix.activity` counts them) and run their K passes at the converters' pace, so a pass's held
  value waits K t_pass + t_reload and moves by -I t / C. The last sampling is converted at once.

A product with one tile column has no analog sum (its tile outputs go to the ADC as they are): no hold.
kT/C draws: key.fold(HOLD, call, i) of each pass's key, i the tile after which the row is sampled,
counters (sample, output channel) from `keys.sample_counters`, cosine half: a sample's draws are its own.
"""

from __future__ import annotations

import torch

from aocsim.errors import InputError
from aocsim.hardware.engine import keys
from aocsim.hardware.engine.counter_rng import normal
from aocsim.hardware.engine.machine import wave_time_s, waves
from aocsim.hardware.physics.converters import pass_time_s
from aocsim.hardware.physics.hold import Hold
from aocsim.hardware.profiles.parts import Parts


def hold_plan(grid: tuple[int, int], wave: int | None, passes: int, pass_s: float,
              reload_s: float) -> tuple[list[list[bool]], list[list[float]]]:
    """(sampled, held_s), each [rows][cols]: whether row r's running sum is sampled onto the hold after tile
    (r, c) (the row's last tile in its wave), and how long that sample waits before the next wave adds to it
    (0 for the row's last sampling, converted at once). wave: tiles per wave (None: all at once)."""
    rows, cols = grid
    tiles = rows * cols
    wave = tiles if wave is None else wave
    sampled = [[False] * cols for _ in range(rows)]
    held = [[0.0] * cols for _ in range(rows)]
    for r in range(rows):
        for c in range(cols):
            i = r * cols + c
            if c == cols - 1 or (i + 1) // wave != i // wave:
                sampled[r][c] = True
                if c < cols - 1:  # until the next wave has run (`machine.wave_time_s`)
                    next_wave = waves(tiles, wave)[(i + 1) // wave]
                    held[r][c] = wave_time_s(next_wave, passes, pass_s, reload_s)
    return sampled, held


def hold_gates(parts: Parts, grid: tuple[int, int], tile_size: int, outputs: int, wave: int | None,
               passes: int, dtype: torch.dtype, device: torch.device | str
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """(gate, keep, shift) [cols, M] of a hold that acts (None where none does, or with one tile column): the
    kT/C std where row r's running sum is sampled after tile column c (else 0), what the sampling keeps of
    the sum (1 + k / C; else 1), and the volts it adds: the injection's q0 / C and the leakage's -I t / C over
    the time it is then held (`hold_plan`)."""
    hold = Hold.of(parts)
    if not hold.acts or grid[1] == 1:
        return None
    reload_s = float(parts.slm.reload_time_s) if wave is not None else 0.0
    sampled, held = hold_plan(grid, wave, passes, pass_time_s(parts), reload_s)

    def per_output(table: list[list]) -> torch.Tensor:  # [rows][cols] -> [cols, M]: row r's on its outputs
        return torch.tensor(table, dtype=dtype, device=device).T.repeat_interleave(tile_size, dim=1)[:, :outputs]

    drift = [[hold.drift_v(t) for t in row] for row in held]
    steps = [[hold.sampling_step_v if s else 0.0 for s in row] for row in sampled]
    gains = [[hold.sampling_gain if s else 1.0 for s in row] for row in sampled]
    return (per_output(sampled) * hold.noise_std_v, per_output(gains),
            per_output(steps) + per_output(drift))


def hold_draws(parts: Parts, bases: list[keys.Key] | None, call: int | torch.Tensor, tiles: int,
               samples: torch.Tensor, tile_size: int, loads: int = 1) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The kT/C streams (key.fold(HOLD, call, i) of each pass's key) and counters of a hold with a
    capacitance (None without): [T, K, 1, 1] and [B, tile_size] for one load, or with `loads` S > 1
    (bases in the order (load, pass); the rows S groups of G) [T, K, S, 1, 1] and [S, G, tile_size].
    With a call per row (int64 [S G]) the streams' 1 of the rows is G: each row's own."""
    if Hold.of(parts).noise_std_v == 0:
        return None
    if bases is None:
        raise InputError("generator = None; the profile draws kT/C noise on analog partial sums "
                         "(readout.hold_capacitance_f), so expected a seed, torch.Generator or Key")
    streams = keys.fold_calls(bases, keys.Stream.HOLD, call, tiles, samples.device, loads)
    counters = keys.sample_counters(samples, tile_size)
    if isinstance(call, torch.Tensor):  # [S, G, K, T] -> [T, K, S, G, 1]
        streams = streams.permute(3, 2, 0, 1)[..., None]
    else:  # [S K, T] -> [T, K, S, 1, 1]
        streams = streams.view(loads, -1, tiles).permute(2, 1, 0)[..., None, None]
    if loads == 1:
        return streams[:, :, 0], counters
    return streams, counters.view(loads, -1, tile_size)


def held_sum(partials: torch.Tensor, gate: torch.Tensor, keep: torch.Tensor, shift: torch.Tensor,
             draws: tuple[torch.Tensor, torch.Tensor] | None, rows: int, tile_size: int, passes: int) -> torch.Tensor:
    """The running sum [K, B, M] of the partials [cols, K, B, M]: tile column by column, add, sample (times
    `keep`, plus kT/C from `draws` gated by `gate`), then shift (injection and leakage while held); the
    arithmetic only (`hold_gates`, `hold_draws`)."""
    cols, m = partials.shape[0], partials.shape[-1]
    noise = None
    if draws is not None:  # each pass samples its own kT/C even where the optics drew nothing
        partials = partials.expand(cols, passes, *partials.shape[2:])
        noise = normal(*draws, partials.dtype).reshape(rows, cols, passes, -1, tile_size).permute(
            1, 2, 3, 0, 4).reshape(cols, passes, -1, rows * tile_size)[..., :m]  # [cols, K, B, M] like the partials
    total = torch.zeros_like(partials[0])
    for c in range(cols):
        total = (total + partials[c]) * keep[c]
        if noise is not None:
            total = total + gate[c] * noise[c]
        total = total + shift[c]
    return total
