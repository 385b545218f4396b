"""The hold of an analog partial sum (docs/PHYSICS.md sections 3 and 6; aocsim/hardware/engine/partial_sums.py):
kT/C noise per sampling (`readout.hold_capacitance_f`), charge injection per sampling (`readout.hold_injection_c`,
`readout.hold_injection_c_per_v`) and leakage while held (`readout.hold_leakage_a`).
Expected values are recomputed here from scipy's constants and the documented hold times."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.constants
import torch

from aocsim.errors import InputError, ProfileError
from aocsim.hardware.engine.machine import Mount
from aocsim.hardware.engine.tiles import TiledMatrix
from aocsim.hardware.physics import components as C
from aocsim.hardware.physics.hold import Hold
from aocsim.hardware.physics.sources import without_noise
from aocsim.hardware.profiles.profile import load_device

F64 = torch.float64
OFF = {"readout.hold_capacitance_f": None, "readout.hold_leakage_a": 0.0, "readout.hold_injection_c": 0.0,
       "readout.hold_injection_c_per_v": 0.0}


def _rand(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


@pytest.mark.parametrize("name", ["ideal", "aoc48-twin", "aoc16-twin", "aoc-projected"])
def test_ideal_and_twin_profiles_hold_nothing(name: str) -> None:
    v = load_device(name).values
    assert all(v[k] is None if k == "readout.hold_capacitance_f" else v[k] == 0.0 for k in OFF)
    assert not Hold.of(load_device(name).parts).acts


@pytest.mark.parametrize("mount", [None, Mount(count=2, multiplexed=True)])
@pytest.mark.parametrize("passes", [1, 2])
def test_with_the_keys_off_analog_partial_sums_add_as_before(mount: Mount | None, passes: int) -> None:
    """Keys off: the ADC sees the plain sum of the cols partials, bit for bit (noise of every other kind on)."""
    dev = load_device("aoc48", OFF)
    tiles = TiledMatrix(dev, 0.01 * _rand(0, 70, 130), generator=5, mount=mount)  # a 2 x 3 grid
    out = tiles(_rand(1, 6, 130), keep_partials=True, passes=passes, call=3)
    partials = out.partials if passes > 1 else out.partials[:, None]
    low, high = (float(b) for b in dev.values["readout.range_v"])
    reading = C.quantize_range(partials.sum(0), low, high, dev.values["readout.adc_bits"])
    expected = (reading[0] if passes == 1 else reading.mean(0)) * out.input_scale[:, None]
    assert torch.equal(out.y, expected)


def _waves_per_row(rows: int, cols: int, wave: int) -> list[int]:
    """How many waves of `wave` tiles hold some of each row's tiles (tile i = r cols + c in wave i // wave)."""
    return [len({(r * cols + c) // wave for c in range(cols)}) for r in range(rows)]


@pytest.mark.parametrize("mount, passes", [(None, 1), (None, 4), (Mount(count=1, multiplexed=True), 1),
                                           (Mount(count=4, multiplexed=True), 1)])
def test_hold_noise_std_is_kt_over_c_per_sampling(mount: Mount | None, passes: int) -> None:
    """Noise-free optics, hold noise only: y - W t has std sqrt(k T / C) sqrt(samplings) per output (one
    sampling per wave that adds to the row; weight-stationary: one), over sqrt(K) for K passes averaged."""
    cap, temp = 1e-15, 300.0  # 2.03 mV rms per sampling
    dev = load_device("ideal", {"readout.hold_capacitance_f": cap, "noise.thermal.temperature_k": temp})
    rows, cols, ts, batch = 3, 3, 8, 2000
    w = _rand(2, rows * ts, cols * ts)
    t = _rand(3, 1, cols * ts).expand(batch, -1)  # one input, 2000 sample indices: 2000 independent draws
    out = TiledMatrix(dev, w, tile_size=ts, generator=11, mount=mount)(t, passes=passes)
    noise = ((out.y - t @ w.T) / out.input_scale[:, None]).numpy()  # node volts
    waves = [1] * rows if mount is None else _waves_per_row(rows, cols, mount.count)
    per_output = np.repeat(np.sqrt(np.array(waves) * scipy.constants.k * temp / cap / passes), ts)
    z = noise / per_output  # standard normal where the model holds
    n = z.size
    assert abs(z.mean()) < 4 / math.sqrt(n)
    assert abs(z.std() - 1) < 4 / math.sqrt(2 * n), (z.std(), waves)


def _held(partials: torch.Tensor, rows: int, cols: int, ts: int, count: int | None, gain: float, step: float,
          drift: float) -> torch.Tensor:
    """The documented running sum, written out: row r's partials added tile column by column; each sampling
    (after the row's last tile in a wave of `count` tiles; None: one wave) keeps `gain` of the sum and adds
    `step`; a sampling the next wave adds to moves by `drift` while held."""
    out = torch.zeros_like(partials[0])
    for r in range(rows):
        held = torch.zeros_like(partials[0][:, :ts])
        for c in range(cols):
            i = r * cols + c
            held = held + partials[c][:, r * ts:(r + 1) * ts]
            last = c == cols - 1
            if last or (count is not None and (i + 1) // count != i // count):
                held = held * gain + step
                if not last:
                    held = held + drift
        out[:, r * ts:(r + 1) * ts] = held
    return out


@pytest.mark.parametrize("count, passes", [(1, 1), (2, 1), (1, 3), (4, 2)])
@pytest.mark.parametrize("leak, cap", [(1e-12, 1e-12), (1e-12, 4e-12), (-3e-12, 1e-12)])
def test_a_held_partial_sum_moves_by_its_leakage_current_times_its_hold_time_over_c(
        count: int, passes: int, leak: float, cap: float) -> None:
    """Time-multiplexed, noise off: a sampling after tile i waits K t_pass + t_reload (the next wave's tiles
    written at once; on ideal a pass is a round trip: its converters keep up) and moves by -I t / C whatever
    its level: linear in t and 1 / C, the same at every level; weight-stationary holds nothing back."""
    reload = 5e-3
    dev = load_device("ideal", {"readout.hold_capacitance_f": cap, "readout.hold_leakage_a": leak,
                                "noise.multiplier": 0.0, "slm.reload_time_s": reload})
    rt = float(dev.values["loop.round_trip_s"])
    rows, cols, ts = 2, 3, 4
    w, t = _rand(4, rows * ts, cols * ts), _rand(5, 3, cols * ts)
    tiles = TiledMatrix(dev, w, tile_size=ts, generator=0, mount=Mount(count=count, multiplexed=True))
    out = tiles(t, keep_partials=True, passes=passes)
    partials = (out.partials if passes > 1 else out.partials[:, None])[:, 0]  # [cols, B, M]: every pass alike
    drift = -leak * (passes * rt + reload) / cap  # 1 pA for 5 ms on 1 pF: 5 mV
    expected = _held(partials, rows, cols, ts, count, 1.0, 0.0, drift)
    torch.testing.assert_close(out.y, expected * out.input_scale[:, None], rtol=1e-12, atol=1e-12)
    if count < cols * rows:
        moved = (out.y / out.input_scale[:, None] - partials.sum(0)).abs()
        assert moved.max() == pytest.approx(abs(drift) * max(_waves_per_row(rows, cols, count)[r] - 1
                                                             for r in range(rows)), rel=1e-9)
    stationary = TiledMatrix(dev, w, tile_size=ts, generator=0)(t, keep_partials=True)
    assert torch.equal(stationary.y, stationary.partials.sum(0) * stationary.input_scale[:, None])


@pytest.mark.parametrize("mount", [None, Mount(count=2, multiplexed=True)])
@pytest.mark.parametrize("q0, k", [(-2e-16, 0.0), (0.0, 2.5e-16), (-2e-16, 2.5e-16)])
def test_each_sampling_injects_q0_plus_k_v_over_c(mount: Mount | None, q0: float, k: float) -> None:
    """Noise off: every sampling of the running sum V onto the hold moves it to V + (q0 + k V) / C (q0 / C =
    -200 uV and k / C = 2.5e-4 on 1 pF), once per wave that adds to the row (weight-stationary: once)."""
    cap = 1e-12
    dev = load_device("ideal", {"readout.hold_capacitance_f": cap, "readout.hold_injection_c": q0,
                                "readout.hold_injection_c_per_v": k, "noise.multiplier": 0.0})
    rows, cols, ts = 2, 3, 4
    w, t = _rand(8, rows * ts, cols * ts), _rand(9, 5, cols * ts)
    out = TiledMatrix(dev, w, tile_size=ts, generator=0, mount=mount)(t, keep_partials=True)
    expected = _held(out.partials, rows, cols, ts, None if mount is None else mount.count, 1 + k / cap, q0 / cap, 0.0)
    torch.testing.assert_close(out.y, expected * out.input_scale[:, None], rtol=1e-12, atol=1e-12)
    assert (out.y / out.input_scale[:, None] - out.partials.sum(0)).abs().max() > 1e-5  # visible: >= 10 uV


def test_a_samples_hold_noise_is_the_same_alone_as_in_its_batch() -> None:
    dev = load_device("ideal", {"readout.hold_capacitance_f": 1e-15})
    w, t = _rand(6, 16, 40), _rand(7, 12, 40)
    tiles = TiledMatrix(dev, w, tile_size=8, generator=9, mount=Mount(count=2, multiplexed=True))
    whole = tiles(t, call=2).y
    alone = torch.cat([tiles(t[i:i + 1], samples=i, call=2).y for i in range(12)])
    torch.testing.assert_close(alone, whole, rtol=0, atol=1e-12)
    twins = tiles(t[:1].expand(2, -1), call=2).y  # two indices, two draws
    assert (twins[0] - twins[1]).abs().max() > 1e-6
    assert (tiles(t, call=3).y - whole).abs().max() > 1e-6  # each call draws anew
    quiet = TiledMatrix(without_noise(dev), w, tile_size=8, mount=Mount(count=2, multiplexed=True))(t)
    torch.testing.assert_close(quiet.y, t @ w.T, rtol=0, atol=1e-12)  # the multiplier silences kT/C
    with pytest.raises(InputError, match=r"generator = None; the profile draws kT/C noise .*hold_capacitance_f"):
        TiledMatrix(dev, w, tile_size=8)(t)


def test_lab_profiles_assume_one_picofarad_ten_femtoamperes_and_a_small_switch() -> None:
    for name in ("aoc48", "aoc16"):
        hold = Hold.of(load_device(name).parts)
        assert (hold.capacitance_f, hold.leakage_a) == (1e-12, 1e-14)
        assert (hold.injection_c, hold.injection_c_per_v) == (-2e-16, 2.5e-16)
        assert hold.noise_std_v == pytest.approx(math.sqrt(scipy.constants.k * 300.0 / 1e-12))  # 64.4 uV
        assert hold.drift_v(5e-3) == pytest.approx(-50e-6, abs=0)  # 10 fA for a 5 ms reload on 1 pF: 50 uV
        assert hold.sampling_step_v == pytest.approx(-200e-6, abs=0) and hold.sampling_gain == pytest.approx(1 + 2.5e-4)
    with pytest.raises(ValueError, match=r"Hold.capacitance_f = 0.0; expected a capacitance > 0 F or None"):
        Hold(capacitance_f=0.0)
    with pytest.raises(ProfileError, match=r"readout.hold_leakage_a = 1e-12; expected 0 without a hold capacitance"):
        load_device("ideal", {"readout.hold_leakage_a": 1e-12})
