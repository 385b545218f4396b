"""Optical tiles: y = W t for any [M, K] matrix on a chip of N channels (`TiledMatrix`, `tiled_matvec`).

Data flow of one call (docs/ARCHITECTURE.md: profile -> weight load -> optics; here one pass, no loop):

1. Encode: per sample b, s_in[b] = max_k |t[b, k]| / r (s_in = 1 for an all-zero sample), so the
   emitter drive u = t / s_in spans [-r, r] volts. r (`input_range`) defaults to the emitters' range:
   the amplitude of the drive the loop gives them (the nonlinearity's swing: 1 for tanh, |d| =
   0.215 V for the calibrated sigmoid), capped by the largest symmetric range inside
   `injection.clip` (1 on `ideal`: no clip, tanh). Not the clip half-range alone: 1.3 V on the
   twins lies far outside the calibrated LED cubics, whose response turns over there. With
   `predistort`, u is replaced by the drive whose mean LED response is linear in it
   (`components.predistort_drive`: the driver's digital lookup before the DAC; per tile, its module's
   cubics, `emitter_calibration.tile_shapes`), then clipped and DAC-quantised (`OpticalLoop.injection`).
2. Tile: W is cut into a grid of rows x cols blocks of `tile_size`, zero-padded to the chip's N
   channels. Tile i = r * cols + c is its own `OpticalLoop(gain="absolute", tile=i, module=i mod
   modules)`: its own SLM load (scale max |W_tile|, programming error key.fold(PROGRAMMING, i)) on
   the module that holds it (that module's variation and dark currents). Padded inputs sit at zero
   drive; padded outputs are discarded.
3. Optics: `step.optical` (the loop iteration's own optical stage) acts on u directly, no
   nonlinearity (the input drives the emitters), plus the tile's folded constant `k0()`. Per-call
   noise: key.fold(TILE_CALL, call, i), counters (sample, channel) from `keys.sample_counters`
   (cosine half RIN, sine half detector), so a sample's noise does not depend on its batch.
   With gain="absolute" the node of tile (r, c) carries W_rc u_c in volts (exactly on `ideal`).
4. Readout: the ADC (`readout.adc_bits` over `readout.range_v`, clamping there) sees node volts,
   i.e. (W t) / s_in plus the analog errors, before any digital scaling. "analog": an output row's
   cols partials added at an analog summing node and held (kT/C, droop: `partial_sums`), one ADC per
   output; "digital": one ADC per tile output, the codes summed digitally. y = reading * s_in (digital).
   Callers scale W so that |W u| fits range_v; `adc_clipped` counts the inputs that did not.

The machine the tiles run on (weight-stationary or time-multiplexed): `aocsim.hardware.engine.machine`. Not
modelled here: saturation rails, loop bandwidth and drift (they act on the loop state across iterations; a tile
pass is one settled round trip of a weight load), and any per-tile calibration: on the calibrated twins the
absolute convention's small-signal gain is not 1 (about 0.13 on aoc48-twin) and the node offsets (k0, LED bias,
darkness) are un-scaled with the signal, so y there is an uncalibrated analog reading of W t (exact on `ideal`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from aocsim._checks import short
from aocsim.errors import InputError
from aocsim.hardware.engine import keys
from aocsim.hardware.engine.loop import OpticalLoop
from aocsim.hardware.engine.machine import Mount, wave_time_s, waves
from aocsim.hardware.physics.converters import pass_time_s, product_latency_s
from aocsim.hardware.profiles.profile import DeviceProfile, load_device
from aocsim.hardware.engine.step import Constants, stack_constants
from aocsim.hardware.engine.tile_pass import input_scale  # noqa: F401 (re-exported)
from aocsim.hardware.engine.tile_product import LoadStack, TiledProduct
from aocsim.hardware.engine.validate import check_iterations, check_state
from aocsim.hardware.physics.energy import Activity

PARTIAL_SUMS, RELOADS_KEPT = ("analog", "digital"), 64  # RELOADS_KEPT: time-multiplexed reloads' constants kept


def _profile(device: DeviceProfile | str) -> DeviceProfile:
    profile = load_device(device) if isinstance(device, str) else device
    if not isinstance(profile, DeviceProfile):
        raise InputError(f"device = {device!r}; expected a DeviceProfile or a profile name")
    return profile


def _tile_size(profile: DeviceProfile, tile_size: object) -> int:
    n = profile.channels
    if tile_size is None:
        if n is None:
            raise InputError(f"tile_size = None; profile {profile.name!r} has any size (channels: null), "
                             "so expected an integer >= 1")
        return n
    if isinstance(tile_size, bool) or not isinstance(tile_size, int) or tile_size < 1:
        raise InputError(f"tile_size = {tile_size!r}; expected an integer >= 1")
    if n is not None and tile_size > n:
        raise InputError(f"tile_size = {tile_size}; profile {profile.name!r} has {n} channels, "
                         f"so expected an integer in [1, {n}]")
    return tile_size


def _input_range(profile: DeviceProfile, input_range: object) -> float:
    if input_range is not None:
        if isinstance(input_range, bool) or not isinstance(input_range, (int, float)) or not (
                0 < input_range < math.inf):
            raise InputError(f"input_range = {input_range!r}; expected a number > 0 (volts) or None")
        return float(input_range)
    v = profile.parts
    swing = 1.0 if v.nonlinearity.kind == "tanh" else abs(float(v.nonlinearity.coeffs[3]))
    clip = v.injection.clip
    if clip is None:
        return swing
    r = min(-float(clip[0]), float(clip[1]))
    if r <= 0:
        raise InputError(f"injection.clip = {list(clip)} of profile {profile.name!r}; expected a range "
                         "with low < 0 < high (tile inputs are signed)")
    return min(r, swing)


def check_predistort(predistort: object, name: str = "predistort") -> bool:
    if isinstance(predistort, bool):
        return predistort
    what = "linearise the emitter drive" if name == "predistort" else "run the compiled tile product"
    raise InputError(f"{name} = {predistort!r}; expected True or False ({what})")


class TiledMatrix:
    """W [M, K] programmed once onto a grid of optical tiles; call it on batches t [B, K].

    Args:
        device: a `DeviceProfile` or a profile name.
        weight: W [M, K], any float dtype (the computation, t included, runs in it).
        tile_size: block size; required where the profile's channels is null, else <= channels
            (default: channels).
        generator: seed, `torch.Generator` (one key drawn) or `keys.Key`: the static draws of every
            tile and, unless a call passes its own, the per-call noise.
        input_range: r, the emitter drive max |t| maps to (volts; default: module docstring).
        predistort: drive the emitters through the inverse of their mean LED cubic (each emitter's as its
            module measured it, `emitter_calibration`), so that the light is linear in t up to the paths' difference.
        mount: where the tiles sit on the machine's modules (`Mount`; None: one module per tile).
    """

    def __init__(self, device: DeviceProfile | str, weight: torch.Tensor, *, tile_size: int | None = None,
                 generator: keys.Seed = None, input_range: float | None = None, predistort: bool = False,
                 mount: Mount | None = None) -> None:
        self.profile = _profile(device)
        if not isinstance(weight, torch.Tensor) or not weight.is_floating_point() or weight.ndim != 2:
            raise InputError(f"weight must be a floating-point tensor [M, K]; got "
                             f"{type(weight).__name__} {getattr(weight, 'dtype', '')} "
                             f"{tuple(getattr(weight, 'shape', ()))}".rstrip())
        if weight.numel() == 0:
            raise InputError(f"weight has shape {tuple(weight.shape)}; expected M >= 1 and K >= 1")
        if not bool(torch.isfinite(weight).all()):
            raise InputError("weight contains NaN or infinite values")
        self.weight = weight
        self.tile_size = ts = _tile_size(self.profile, tile_size)
        self.channels = n = self.profile.channels or ts
        self.input_range = _input_range(self.profile, input_range)
        self.predistort = check_predistort(predistort)
        self.key = keys.as_key(generator)
        self.grid = (math.ceil(weight.shape[0] / ts), math.ceil(weight.shape[1] / ts))
        tiles, self.mount = self.grid[0] * self.grid[1], (mount := Mount() if mount is None else mount)
        self.multiplexed = mount.multiplexed
        self.modules = min(mount.count, tiles) if mount.multiplexed else tiles  # the modules its products use
        self.blocks = [F.pad(block, (0, n - block.shape[1], 0, n - block.shape[0]))
                       for block in (weight[r * ts:(r + 1) * ts, c * ts:(c + 1) * ts]
                                     for r in range(self.grid[0]) for c in range(self.grid[1]))]
        self.loops = self._load(self.key)
        self._stacked: tuple[Constants, torch.Tensor] | None = None
        self._reloaded: dict[int, tuple[Constants, torch.Tensor]] = {}  # by reload key: a run repeats its calls
        self._shapes: tuple | None = None  # ((dtype, device), the tiles' emitter cubics)
        self._gates: dict[tuple, tuple | None] = {}  # the hold's (gate, keep, shift) by passes, dtype and device
        self._passes: tuple = (None, [])  # ((key value, passes), their pass keys): `pass_keys`
        self._alone: LoadStack | None = None  # this load as a stack of one (`__call__`)

    def _load(self, key: keys.Key | None) -> list[OpticalLoop]:
        """Every tile on its module (programming errors from `key`), its emitters' cubics drifted since measured."""
        return [OpticalLoop(self.profile, block, gain="absolute", generator=key, tile=i, module=self.mount.module(i))
                .cubics_drifted(key and key.fold(keys.Stream.DRIFT, i)) for i, block in enumerate(self.blocks)]

    def activity(self, partial_sums: str, passes: int = 1, *, loads: bool = True) -> Activity:
        """What one product does per sample on the machine (`machine`; docs/PHYSICS.md section 6): every tile
        `passes` times (a round trip each, at the converters' pace) in waves of `modules` tiles (one wave
        when weight-stationary), each wave's tiles written onto their modules at once first when
        time-multiplexed (a weight load per tile, one reload time per wave), the product's conversion and
        digital latency, the DAC conversions of every tile row's input, the ADC conversions of the outputs
        (`conversions`), each reading added into its output digitally (digital partial sums; the K passes'
        mean), and each module busy for its tile's passes alone (`busy_s`: idle otherwise). loads=False:
        without the weight loads and their reload time (`load_activity`: what the samples run together share)."""
        v = self.profile.parts
        dac, adc = self.conversions(partial_sums)
        tiles = self.grid[0] * self.grid[1]
        added = (adc if partial_sums == "digital" else 0) + (adc if passes > 1 else 0)
        time = sum(wave_time_s(n, passes, pass_time_s(v), 0.0) for n in waves(tiles, self.modules))
        time += product_latency_s(v)
        busy = tiles * passes * pass_time_s(v)  # each tile's module lit for its passes, idle otherwise
        own = Activity(time, dac * passes, adc * passes, added * passes, round_trips=tiles * passes,
                       channels=self.channels, modules=self.mount.count if self.multiplexed else tiles, busy_s=busy)
        return own + self.load_activity() if loads else own

    def load_activity(self) -> Activity:
        """The weight loads of one product on a time-multiplexed machine: every tile written onto its module,
        a wave's tiles at once (one `slm.reload_time_s` per wave); nothing when weight-stationary. The
        samples run together in the product share it (docs/PHYSICS.md section 6)."""
        if not self.multiplexed:
            return Activity(0.0, channels=self.channels, modules=self.modules, busy_s=0.0)
        tiles = self.grid[0] * self.grid[1]
        reload = float(self.profile.parts.slm.reload_time_s)
        return Activity(reload * len(waves(tiles, self.modules)), weight_loads=tiles, channels=self.channels,
                        modules=self.mount.count, busy_s=0.0)

    def conversions(self, partial_sums: str) -> tuple[int, int]:
        """(DAC, ADC) conversions per sample of one product: every tile row gets the whole input, and
        an output is converted once (analog partial sums) or once per tile column (digital)."""
        (rows, cols), (m, k) = self.grid, self.weight.shape
        return rows * k, (m if partial_sums == "analog" else cols * m)

    def stacked(self, reload: keys.Key | None = None) -> tuple[Constants, torch.Tensor]:
        """Every tile's constants stacked for one batched pass (`step.stack_constants`) and their folded
        node constants k0 [T, 1, 1, N]; built once per weight load, or for the `reload` written before
        a time-multiplexed product (its programming errors keyed by it)."""
        if reload is not None:
            if reload.value not in self._reloaded:  # kept: a token-by-token run reuses its visits' keys
                self._reloaded = {**dict(list(self._reloaded.items())[1 - RELOADS_KEPT:]),
                                  reload.value: _stack(self._load(reload))}
            return self._reloaded[reload.value]
        if self._stacked is None:
            self._stacked = _stack(self.loops)
        return self._stacked

    def pass_keys(self, key: keys.Key, passes: int) -> list[keys.Key]:
        """The keys of `passes` passes of every tile: pass 0 `key` itself (so that one pass is what it was
        without averaging), pass p >= 1 its fold (REPEAT, p); kept for the last key (a run's calls share it)."""
        if self._passes[0] != (key.value, passes):
            self._passes = ((key.value, passes), [key] + [key.fold(keys.Stream.REPEAT, p) for p in range(1, passes)])
        return self._passes[1]

    def __call__(self, t: torch.Tensor, *, partial_sums: str = "analog", generator: keys.Seed = None,
                 samples: object = None, call: int | torch.Tensor = 0, keep_partials: bool = False, passes: int = 1,
                 compile: bool = False) -> TiledProduct:
        """y = W t through the tiles (module docstring); `call` and `samples` index the noise streams.

        Every tile (and, with `passes` = K > 1, each of its K passes, `pass_keys`) runs as one batched
        product of the step's own optical stage, its draws from key.fold(TILE_CALL, call, i) of its
        pass (`call`: one for every row, or int64 [B], each row's own, which draws what that row draws
        in a call of its own; not with time-multiplexed tiles, whose reload follows the call); y is the
        mean of the K passes' ADC readings (the per-pass noise's std falls as 1 / sqrt(K)).
        Checked here, prepared by `tile_product.LoadStack` (this load alone) and run by `tile_pass` (the
        body: eagerly, or with `compile` its compiled graph; the same numbers to float rounding; needs a
        C++ compiler).
        """
        k = self.weight.shape[1]
        t = check_state("t", t, k).to(dtype=self.weight.dtype, device=self.weight.device)
        if partial_sums not in PARTIAL_SUMS:
            raise InputError(f"partial_sums = {partial_sums!r}; expected one of {list(PARTIAL_SUMS)}")
        compile = check_predistort(compile, "compile")
        ids = keys.check_samples(samples, t.shape[0], t.device)
        call = check_calls(call, t.shape[0], t.device)
        key = self.key if generator is None else keys.as_key(generator)
        if self.loops[0].layout().draws and key is None:
            raise InputError("generator = None; the profile draws noise on every pass (RIN or detector "
                             "noise), so expected a seed, torch.Generator or Key")
        if self._alone is None:
            self._alone = LoadStack([self])
        return self._alone(t, [key], ids, partial_sums=partial_sums, call=call, passes=passes,
                           keep_partials=keep_partials, compile=compile)


def check_calls(call: object, batch: int, device: torch.device) -> int | torch.Tensor:
    """A product's call: an integer >= 0, or an integer tensor [batch] of them (a call per row)."""
    if not isinstance(call, torch.Tensor):
        return check_iterations("call", call)
    if call.dtype not in (torch.int64, torch.int32) or tuple(call.shape) != (batch,) or bool((call < 0).any()):
        raise InputError(f"call = {short(call)}; expected an integer >= 0 or an integer tensor [{batch}] of "
                         "them (a call per row)")
    return call.to(device=device, dtype=torch.int64)


def _stack(loops: list[OpticalLoop]) -> tuple[Constants, torch.Tensor]:
    return (stack_constants([loop.constants() for loop in loops]), torch.stack([loop.k0() for loop in loops])[:, None, None])


def tiled_matvec(device: DeviceProfile | str, weight: torch.Tensor, t: torch.Tensor, *,
                 partial_sums: str = "analog", tile_size: int | None = None, generator: keys.Seed = None,
                 samples: object = None, call: int = 0, keep_partials: bool = False, input_range: float | None = None
                 ) -> TiledProduct:
    """y = W t on `device`'s tiles: `TiledMatrix(device, weight, ...)(t, ...)`, one key for static draws and noise."""
    key = keys.as_key(generator)
    return TiledMatrix(device, weight, tile_size=tile_size, generator=key, input_range=input_range)(
        t, partial_sums=partial_sums, samples=samples, call=call, keep_partials=keep_partials)
