"""What a chip measures of its emitters so that a tile can predistort their drive (`measured_shapes`).

Predistortion (`components.predistort_drive`) needs each emitter's LED cubic up to its gain: its shape
s(d) = d + k2 d^2 + k3 d^3 per path. With `emitter.cubic_spread` = 0 every emitter has the profile's
cubics, which are the twin's calibration of the machine, and a tile inverts their mean. With a spread,
each emitter differs from the profile and only the chip can say how; this module is that measurement.

The measurement, per module, on the chip before any weight load (docs/PHYSICS.md section 3):
- the SLMs hold W = +I (then W = -I), so emitter i reaches output i through a full pixel of the
  positive (then negative) path, and every other output only through dark pixels;
- one emitter at a time is driven through the DAC at LEVELS levels spanning the tiles' drive range
  [-r, r], the others at zero drive, REPEATS passes each; output i is read through the readout ADC;
- a pass's node at output i is one Gaussian: its mean the optical stage without noise, its variance
  `step.node_noise_variance` (every LED's RIN through the operator, the detector sources), drawn
  from the chip's stream (EMITTER_CALIBRATION, module). That is the whole stage's noise to first
  order (the shot noise's dependence on the RIN-moved light is left out; a test checks each
  emitter's shape has the same mean and spread as reading the whole stage, drawing every LED's RIN
  and every detector, which costs 2 N draws per reading instead of one);
- a cubic a0 + a1 d + a2 d^2 + a3 d^3 is fitted to output i's mean reading by least squares; its
  shape is (k3, k2) = (a3, a2) / a1 (the gain a1 and the offset a0 are a weight load's calibration's).

What the readings cannot separate is left in the fit: with +I, output i also sees emitter i's other
path through that path's dark pixel (finite contrast), and its neighbours' detector crosstalk.
An emitter the chip cannot see (a dead fan-in channel: |a1| below DEAD of the median) is left undistorted.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import torch
import torch.nn.functional as F

from aocsim._numerics import least_squares
from aocsim.hardware.engine import keys
from aocsim.hardware.engine.loop import OpticalLoop
from aocsim.hardware.engine.programming import chip_key
from aocsim.hardware.engine.counter_rng import normal
from aocsim.hardware.engine.memo import Memo
from aocsim.hardware.engine.step import node_drive, node_noise_variance, optical
from aocsim.hardware.physics import components as C
from aocsim.hardware.profiles.profile import DeviceProfile

LEVELS = 17  # drive levels per emitter over [-r, r]
REPEATS = 256  # passes per level, averaged (2 x 17 x 256 x N round trips: about 9 ms per module at 20 ns)
DEAD = 0.1  # |a1| below this fraction of the median |a1|: an emitter the detectors do not see (a dead fan-in)
# A chip's measured shapes per module and drive range (`measured_shapes`), in memory and in the calibration store:
# every module of a population's points and chips (16 x 2 x 34 for A5 with every map on tiles; 3 kB each). At 64
# entries a population of 8 A5 points re-measured its emitters for every tile program measurement (1.9x its fits).
SHAPES: Memo[tuple[torch.Tensor, torch.Tensor]] = Memo(
    "emitters", 2048, stored=True, to_records=lambda shapes: [{"positive": shapes[0], "negative": shapes[1]}],
    from_records=lambda records: (records[0]["positive"], records[0]["negative"]))


def _fitted_shape(profile: DeviceProfile, n: int, sign: float, module: int, input_range: float) -> torch.Tensor:
    """[4, N]: per emitter (k3, k2, 1, 0) measured with W = sign I on `module` (N = n channels)."""
    key = chip_key(profile.parts).fold(keys.Stream.EMITTER_CALIBRATION, module)
    eye = torch.eye(n, dtype=torch.float64)
    loop = OpticalLoop(profile, sign * eye, gain="absolute", generator=key.fold(0), module=module)
    levels = loop.injection(torch.linspace(-input_range, input_range, LEVELS, dtype=torch.float64))
    x = torch.diag_embed(levels[:, None].expand(LEVELS, n)).reshape(-1, n)  # row (level, emitter)
    layout, c, gain = loop.layout(), loop.constants(), loop.node(0, x)[0]
    own = torch.arange(n).repeat(LEVELS)[:, None]  # row (level, emitter i) reads output i
    quiet = replace(layout, rin=False, detector_noise=False)
    mean = optical(x, c, node_drive(loop.k0(), c, gain, quiet), quiet, None, None).gather(1, own)
    v = profile.parts
    low, high = (float(b) for b in v.readout.range_v)
    if layout.draws:  # the node's one Gaussian per reading (module docstring), REPEATS readings per row
        std = node_noise_variance(x, c, gain, float(c.noise[1]), float(c.noise[2]), float(c.noise[0])).gather(1, own)
        ids = torch.arange(REPEATS, dtype=torch.int64)
        draws = normal(key.fold(1 + int(sign > 0)).tensor(), keys.sample_counters(ids, x.shape[0]), torch.float64)
        mean = C.quantize_range(mean.T + std.sqrt().T * draws, low, high, v.readout.adc_bits).mean(dim=0)
    else:
        mean = C.quantize_range(mean[:, 0], low, high, v.readout.adc_bits)
    powers = torch.stack([levels ** p for p in range(4)], dim=1)  # [LEVELS, 4]
    a = least_squares(powers, mean.reshape(LEVELS, n))  # [4, N]: a0, a1, a2, a3
    seen = a[1].abs() > DEAD * a[1].abs().median()
    k3, k2 = (torch.where(seen, a[p] / a[1], 0.0) for p in (3, 2))
    return torch.stack([k3, k2, torch.ones(n, dtype=torch.float64), torch.zeros(n, dtype=torch.float64)])


def measured_shapes(profile: DeviceProfile, n: int, module: int, input_range: float, dtype: torch.dtype,
                    device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """(positive, negative): each emitter's measured cubic shape, [4, N] each (module docstring), as the
    chip measures it once: memoised (`SHAPES`, aocsim/hardware/engine/memo.py) on the profile's values,
    the module, the drive range and the measurement's constants, in memory and in the calibration store
    (or a sweep's folder while `aocsim.disk_memo.use` is open). The chip measured them at its calibration
    temperature: `environment.temperature_delta_k` (docs/PHYSICS.md section 3) is 0 for the measurement."""
    if profile.parts.environment.temperature_delta_k != 0:
        profile = profile.with_overrides({"environment.temperature_delta_k": 0.0})
    shapes = SHAPES((profile, n, module, float(input_range), LEVELS, REPEATS, DEAD),
                    lambda: (_fitted_shape(profile, n, 1.0, module, input_range),
                             _fitted_shape(profile, n, -1.0, module, input_range)))
    return tuple(s.to(dtype=dtype, device=device) for s in shapes)  # type: ignore[return-value]


def drive_shapes(profile: DeviceProfile, n: int, module: int, input_range: float, dtype: torch.dtype,
                 device: torch.device | str) -> tuple[tuple[float, ...] | torch.Tensor, ...]:
    """The two LED cubics a tile on `module` predistorts with (`components.predistort_drive` inverts their
    mean): the profile's, shared by every emitter, without a spread (`emitter.cubic_spread` = 0), else
    each emitter's measured shape [4, N] (`measured_shapes`)."""
    v = profile.parts
    if v.emitter.cubic_spread == 0:
        return tuple(float(c) for c in v.emitter.poly_pos), tuple(float(c) for c in v.emitter.poly_neg)
    return measured_shapes(profile, n, module, input_range, dtype, device)


def tile_shapes(profile: DeviceProfile, n: int, modules: list[int], input_range: float, dtype: torch.dtype,
                device: torch.device | str) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """(positive, negative): the cubics the tiles on `modules` predistort with (`drive_shapes`), stacked
    for one call of `components.predistort_drive` on every tile's drive [T, B, N]: the profile's
    shared coefficients (numbers) without a spread, else each tile's coefficients as tensors [T, 1, N]."""
    per_tile = [drive_shapes(profile, n, module, input_range, dtype, device) for module in modules]
    if not isinstance(per_tile[0][0], torch.Tensor):  # one cubic for every emitter of the profile
        return per_tile[0]
    return tuple(tuple(torch.stack([shapes[path][j] for shapes in per_tile])[:, None, :] for j in range(4))
                 for path in (0, 1))  # type: ignore[return-value]


def predistorted_tiles(drive: torch.Tensor, cols: int, tile_size: int, n: int, tiles: int,
                       dac: Callable[[torch.Tensor], torch.Tensor], shapes: tuple[tuple[Any, ...], tuple[Any, ...]],
                       widths: torch.Tensor | None = None) -> torch.Tensor:
    """Every tile's DAC'd emitter drive [T, B, N], T = `tiles`, from the drive [B, K]: tile i (column i mod
    cols) gets its input block through the inverse of its module's emitters (`shapes`, as `tile_shapes`
    returned them), all tiles in one call; its padded channels stay exactly 0 (the DAC converts only real
    inputs): those past K, or past each row's own width `widths` [B] (a stack of programs of several widths,
    `tile_product.LoadStack`)."""
    padded = F.pad(drive, (0, n))
    starts = [(i % cols) * tile_size for i in range(tiles)]
    blocks = torch.stack([padded[:, start:start + n] for start in starts])  # [T, B, N]
    x = dac(C.predistort_drive(blocks, *shapes))
    first = torch.tensor(starts, device=drive.device)
    if widths is None:  # [T, 1, N]: the tile's real inputs
        live = torch.arange(n, device=drive.device) < (drive.shape[1] - first).clamp_max(tile_size)[:, None, None]
    else:  # [T, B, N]: each row's
        live = torch.arange(n, device=drive.device) < (widths[None, :] - first[:, None]).clamp_max(tile_size)[..., None]
    return torch.where(live, x, torch.zeros((), dtype=x.dtype, device=x.device))


def shared_shapes(each: list[Any]) -> Any:
    """The loads' predistortion cubics: one load's where every load's are the same (a chip's seeds), else
    the list of each load's (a population's)."""
    first = each[0]

    def same(a: Any, b: Any) -> bool:
        if isinstance(a, tuple):
            return isinstance(b, tuple) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        if isinstance(a, torch.Tensor):
            return isinstance(b, torch.Tensor) and (a is b or torch.equal(a, b))
        return a == b

    return first if all(same(first, other) for other in each[1:]) else list(each)
