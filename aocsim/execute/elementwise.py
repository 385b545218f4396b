"""An implicit SSM's SiLU and softplus as analog circuits (`place_ssm(..., elementwise="analog")`).

By default a placed model computes its elementwise functions digitally and exactly. Placed with
`elementwise="analog"`, each block's three sites (SiLU after the causal conv, softplus of the step
size, SiLU of the gate; `Elementwise.SITES`) run on analog function circuits, modelled as

    y = ADC( (1 + g_c) f((1 + a_c) x + b_c) + o_c + n )

(after calibration, (1 + g_c) times `temperature.function_gain`: the chip's temperature change since)

per channel c: g_c a static relative gain error (std `elementwise.gain_std`) and o_c a static
offset (std `elementwise.offset_std` x full scale); a_c and b_c the circuit's shape errors (std
`elementwise.shape_std` each): a_c scales the input axis (the slope factor or input transconductance
of a subthreshold or bipolar exp / log stage) and b_c shifts the knee (its threshold voltage, in units
of x, where the knee is about 1 wide). All four are drawn once per chip from its
`variation.chip_seed`; n the noise of one evaluation (std `elementwise.noise_std` x full scale),
keyed like the tiles' noise by sequence, position and visit; the ADC is the readout converter
(`readout.adc_bits`) over [-full scale, full scale]. As the tiles are, each circuit is calibrated
when the model is placed: a sweep of its input range, read with noise, fits g and o per channel
by least squares, and every reading is corrected digitally to (y - o) / g; what remains is the
fit's error, the shape errors (not in the span of f and 1: no gain and offset removes them),
quantisation and noise. The full scale of a site is the largest |f(x)|
it sees on the exact path for the calibration sequences, over HEADROOM (as for the tiles' nodes),
so values beyond it clip. The input comes in through a DAC of `injection.dac_bits` over the range
of inputs the site saw, widened the same way. RMSNorm, exp(A), the conv and the scan stay digital. On `ideal` (no errors, no
converters) the analog functions are exact. Figures in the profiles are assumptions
(devices/SCHEMA.md, "elementwise"); results in docs/DEVICE_RUNS.md.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from aocsim.execute.fit import affine_fit
from aocsim.hardware.physics import components as C
from aocsim.hardware.physics import temperature
from aocsim.hardware.engine import keys
from aocsim.hardware.engine.counter_rng import normal_pair
from aocsim.hardware.physics.energy import Activity
from aocsim.hardware.profiles.profile import DeviceProfile
from aocsim.nn.ssm_blocks import Elementwise

HEADROOM = 0.8  # the largest calibration output, as a fraction of a site's full scale
PROBES, REPEATS = 64, 4  # the calibration sweep of each circuit: input points, readings of each


class AnalogElementwise(Elementwise):
    """One block's SiLU and softplus on analog circuits of one chip (module docstring).

    Args:
        device: the chip's profile.
        block: the block's index (its own static draws).
        scales: per site, the smallest and largest x and the largest |f(x)| of the calibration inputs
            (the DAC's and ADC's ranges: widened by 1 / HEADROOM).
        channels: channel count per site.
        generator: key of the calibration sweep's noise.
        calibrate: fit and apply the per-channel correction (False: the raw circuit).
    """

    def __init__(self, device: DeviceProfile, block: int, scales: dict[str, tuple[float, float, float]],
                 channels: dict[str, int], dtype: torch.dtype, *, generator: keys.Seed = 0,
                 calibrate: bool = True) -> None:
        super().__init__()
        v = device.parts
        # the DAC's range: the inputs seen in calibration, widened by 1 / HEADROOM about their middle
        self.input_range = {site: ((lo + hi) / 2 - max(hi - lo, 1e-12) / (2 * HEADROOM),
                                   (lo + hi) / 2 + max(hi - lo, 1e-12) / (2 * HEADROOM))
                            for site, (lo, hi, _) in scales.items()}
        self.seen = {site: (lo, hi) for site, (lo, hi, _) in scales.items()}
        self.scale = {site: max(peak, 1e-12) / HEADROOM for site, (_, _, peak) in scales.items()}
        self.noise_std = float(v.elementwise.noise_std)
        self.dac_bits, self.adc_bits = v.injection.dac_bits, v.readout.adc_bits
        chip = keys.chip_root(v.variation.chip_seed).fold(keys.Stream.ELEMENTWISE, block)
        self.gain, self.offset = {}, {}
        self.shape_std = float(v.elementwise.shape_std)
        self.input_gain, self.knee = {}, {}  # 1 + a_c and b_c (applied only where shape_std > 0)
        for i, site in enumerate(self.SITES):
            n = channels[site]
            self.gain[site] = 1.0 + float(v.elementwise.gain_std) * keys.normals(
                chip.fold(i, 0), (n,), dtype=dtype, device="cpu")
            self.offset[site] = float(v.elementwise.offset_std) * self.scale[site] * keys.normals(
                chip.fold(i, 1), (n,), dtype=dtype, device="cpu")
            self.input_gain[site] = 1.0 + self.shape_std * keys.normals(chip.fold(i, 2), (n,), dtype=dtype,
                                                                        device="cpu")
            self.knee[site] = self.shape_std * keys.normals(chip.fold(i, 3), (n,), dtype=dtype, device="cpu")
        # the chip's temperature since calibration moves every gain (docs/PHYSICS.md section 3); 1 while calibrating
        self.warm, self._warm_now = temperature.function_gain(v.environment), 1.0
        self.token_keys = None  # set by PlacedSSM for a run (aocsim.execute.device_linear.TokenKeys)
        # Per-channel correction y -> (y - o) / g, fitted on a probe sweep of each circuit (calibrate).
        self.fitted_gain = {site: torch.ones_like(g) for site, g in self.gain.items()}
        self.fitted_offset = {site: torch.zeros_like(o) for site, o in self.offset.items()}
        if calibrate:
            self._calibrate(keys.as_key(generator) or keys.Key(0), dtype)
        self._warm_now = self.warm
        self.run_key: keys.Key | None = None
        self.calls = 0

    def _calibrate(self, key: keys.Key, dtype: torch.dtype) -> None:
        """Sweep each channel's input over the range it saw (PROBES points, REPEATS readings each, with the
        circuit's noise) and fit its reading as g f(x) + o by least squares: what a machine's
        calibration of its function circuits would do. The correction removes the static gain and
        offset; the shape errors' part outside the span of f and 1, quantisation and noise remain."""
        self.run_key, self.calls = key, 0
        for site in self.SITES:
            (lo, hi), (dlo, dhi), n = self.seen[site], self.input_range[site], len(self.gain[site])
            x = torch.linspace(lo, hi, PROBES, dtype=dtype)[:, None].expand(PROBES, n).repeat(REPEATS, 1)
            f = FUNCTIONS[site]
            reading = self._circuit(f, x, site)
            target = f(C.quantize_range(x, dlo, dhi, self.dac_bits))
            self.fitted_gain[site], self.fitted_offset[site] = affine_fit(target, reading)

    def reset(self, generator: keys.Seed) -> None:
        self.run_key, self.calls = keys.as_key(generator), 0

    def activity(self) -> Activity:
        """What one evaluation of every site does for one token: each channel's input through a DAC and
        its output through an ADC (the circuits themselves settle within the round trip)."""
        n = sum(len(g) for g in self.gain.values())
        return Activity(0.0, n, n)

    def _circuit(self, f, x: torch.Tensor, site: str) -> torch.Tensor:
        """The ADC's reading of the circuit: ADC((1 + g) f((1 + a) DAC(x) + b) + o + n)."""
        full = self.scale[site]
        low, high = self.input_range[site]
        x = C.quantize_range(x, low, high, self.dac_bits)
        # the shape errors act inside f; skipped at 0 so that a profile without them reads as before, bit for bit
        shaped = x * self.input_gain[site].to(x) + self.knee[site].to(x) if self.shape_std > 0 else x
        gain = self.gain[site].to(x) if self._warm_now == 1.0 else self.gain[site].to(x) * self._warm_now
        y = f(shaped) * gain + self.offset[site].to(x)
        if self.noise_std > 0:
            if self.run_key is None:
                raise RuntimeError("AnalogElementwise used before reset(generator): no noise key")
            index = self.SITES.index(site)
            rows = self.token_keys
            flat = x.reshape(-1, x.shape[-1])
            if rows is not None and rows.positions is not None:  # a placed model's run: keyed per token
                samples, visit = rows.samples(tuple(x.shape[:-1])), rows.pass_visit("an analog elementwise function")
            else:
                samples, visit = torch.arange(flat.shape[0]), self.calls
            key = self.run_key.fold(index, visit).tensor(x.device)
            draw, _ = normal_pair(key, keys.sample_counters(samples.to(x.device), x.shape[-1]), x.dtype)
            y = y + (self.noise_std * full) * draw.reshape(x.shape)
        self.calls += 1
        return C.quantize_range(y, -full, full, self.adc_bits)

    def _analog(self, f, x: torch.Tensor, site: str) -> torch.Tensor:
        """The circuit's reading, corrected digitally with the calibration's gain and offset."""
        reading = self._circuit(f, x, site)
        return (reading - self.fitted_offset[site].to(x)) / self.fitted_gain[site].to(x)

    def silu(self, x: torch.Tensor, site: str) -> torch.Tensor:
        return self._analog(F.silu, x, site)

    def softplus(self, x: torch.Tensor, site: str) -> torch.Tensor:
        return self._analog(F.softplus, x, site)


FUNCTIONS = {"conv": F.silu, "dt": F.softplus, "gate": F.silu}  # what each site computes


class _Recorder(Elementwise):
    """Exact functions that remember the largest |x| and |f(x)| per site (the calibration of the full scales)."""

    def __init__(self) -> None:
        super().__init__()
        self.peak = torch.tensor([[float("inf"), -float("inf"), 0.0]] * len(self.SITES),
                                 dtype=torch.float64)  # min x, max x, max |f(x)| per site

    def _note(self, x: torch.Tensor, y: torch.Tensor, site: str) -> torch.Tensor:
        i = self.SITES.index(site)
        x, y = x.detach(), y.detach()
        self.peak[i, 0] = min(float(self.peak[i, 0]), float(x.min()))
        self.peak[i, 1] = max(float(self.peak[i, 1]), float(x.max()))
        self.peak[i, 2] = max(float(self.peak[i, 2]), float(y.abs().max()))
        return y

    def silu(self, x: torch.Tensor, site: str) -> torch.Tensor:
        return self._note(x, F.silu(x), site)

    def softplus(self, x: torch.Tensor, site: str) -> torch.Tensor:
        return self._note(x, F.softplus(x), site)


def site_channels(config) -> dict[str, int]:
    """Channels of each site of a block: the conv's outputs, the heads, the inner width."""
    return {"conv": config.conv_dim, "dt": config.n_heads, "gate": config.d_inner}


def scales_of(peaks: torch.Tensor) -> dict[str, tuple[float, float, float]]:
    """A recorder's peaks [site, (min x, max x, max |f(x)|)] as a dict by site."""
    return {site: (float(peaks[i, 0]), float(peaks[i, 1]), float(peaks[i, 2]))
            for i, site in enumerate(Elementwise.SITES)}


def recorders(model) -> list[_Recorder]:
    """Put a recorder into every block of `model` (remove with `restore`)."""
    out = []
    for block in model.blocks:
        block.elementwise = _Recorder()
        out.append(block.elementwise)
    return out


def restore(model) -> None:
    """Every block of `model` back on exact functions (after `recorders`)."""
    for block in model.blocks:
        block.elementwise = Elementwise()
