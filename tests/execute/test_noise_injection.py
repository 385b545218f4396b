"""Noise injection as its own wrapper (aocsim/execute/noise_injection.py) and the base class's run profile
(aocsim/execute/placed.py; docs/ARCHITECTURE.md, "What a change costs"): the wrapper is applied in one place
(`registry.Placed.build`) and refuses a kind without noise sites in one line; the plain Mamba2 kind takes drawn
noise on its inputs through it, at the dB set, and with the noise off it is its run without the wrapper bit for
bit; every bundled kind builds its machine from `run_profile`, so that the profile a run uses is the one it
records."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

from aocsim import InputError, compare, load_model
from aocsim.execute import place, registry
from aocsim.execute.mamba2 import HybridMamba2
from aocsim.execute.noise_injection import NoiseInjected
from aocsim.execute.placed import KINDS, PlacedModel
from aocsim.execute.registry import resolve, resolve_profile
from aocsim.execute.snr import SiteNoise
from aocsim.experiments.workloads import default_workload
from aocsim.hardware.physics.sources import without_noise
from aocsim.hardware.profiles.profile import load_device

PACKAGE = Path(__file__).resolve().parents[2] / "aocsim"
PARITY = torch.randint(0, 2, (4, 12), generator=torch.Generator().manual_seed(0))
pytestmark = pytest.mark.usefixtures("one_torch_thread")  # bit-for-bit comparisons (tests/conftest.py)


@pytest.fixture(scope="module")
def lm():
    model = load_model("charlm-mamba2")
    w = default_workload(model, sequences=2, length_factor=1)
    return model, w.inputs[:, :48], w.calibration


def test_the_wrapper_is_applied_in_one_place(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only `Placed.build` constructs it (no kind wraps itself, no caller wraps again), compare builds every
    chip through it, and it wraps exactly when the noise options ask for something."""
    built = [(path.relative_to(PACKAGE).as_posix(), line) for path in PACKAGE.rglob("*.py")
             for line in path.read_text().splitlines() if re.search(r"(?<!class )NoiseInjected\(", line)]
    assert [where for where, _ in built] == ["execute/registry.py"], built
    model = load_model("parity-implicit")
    abstract = {"on_tiles": "none", "max_iter": 4}
    noisy = place(model, "ideal", {**abstract, "snr_db": 20.0}, calibration=PARITY)
    assert isinstance(noisy, NoiseInjected) and type(noisy.inner).__name__ == "HybridSSM"
    for quiet in ({}, {"snr_convention": "elementwise", "snr_kind": "multiplicative"}):  # nothing injected
        assert not isinstance(place(model, "ideal", {**abstract, **quiet}, calibration=PARITY), NoiseInjected)
    seen = []
    build = registry.Placed.build
    monkeypatch.setattr(registry.Placed, "build", lambda self, *args: seen.append(build(self, *args)) or seen[-1])
    ds = compare(model, "ideal", PARITY[:2], placement={**abstract, "snr_db": 20.0}, chips=(0, 1),
                 calibration=PARITY)
    assert len(seen) == 2 and all(isinstance(p, NoiseInjected) for p in seen)  # one per chip, wrapped
    assert "noise at 20 dB SNR on the inputs (additive)" in ds.attrs["placement"]


def test_a_kind_without_noise_sites_is_refused_in_one_line(lm, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kind the option is declared for but that offers no site: refused when the placement is resolved
    (before any fit), naming the option, its value and the kinds that take it."""
    model, x, calibration = lm
    monkeypatch.setattr(HybridMamba2, "noise_sites", ())
    with pytest.raises(InputError) as error:
        resolve(model, load_device("aoc48"), {"snr_db": 20.0})
    message = str(error.value)
    assert message.startswith("snr_db = 20.0 on a hybrid Mamba2: it has no noise sites") and "\n" not in message
    assert message.endswith("expected a kind that takes it (hybrid SSMs)")
    assert [k.kind for k in KINDS if k.noise_sites] == ["hybrid SSM"]


def test_what_the_plain_mamba2_kind_cannot_take_is_refused_in_one_line(lm) -> None:
    model, _, _ = lm
    profile = load_device("aoc48")
    for options, words in (({"snr_db": 20.0, "snr_site": "states"},
                            "snr_site = 'states' on a hybrid Mamba2: its noise sites are 'inputs'"),
                           ({"snr_db": 20.0, "snr_kind": "device"}, "snr_kind = 'device' on a plain Mamba2 model"),
                           ({"ema_alpha": 0.2}, "ema_alpha = 0.2 applies to hybrid SSMs;"),
                           ({"snr_states_db": 20.0}, "snr_states_db = 20.0 applies to hybrid SSMs;")):
        with pytest.raises(InputError, match=re.escape(words)) as error:
            resolve(model, profile, options)
        assert "\n" not in str(error.value)


@pytest.mark.parametrize("kind", ["additive", "multiplicative"])
def test_mamba2_draws_its_input_noise_at_the_db_set(lm, kind: str) -> None:
    """As the implicit SSM's (tests/execute/test_snr_noise.py): on the abstract model (every map digital) the
    noise drawn on every block's input projection's input measures the dB set."""
    model, x, calibration = lm
    for db in (10.0, 30.0):
        placed = place(model, "ideal", {"on_tiles": "none", "snr_db": db, "snr_kind": kind}, chip=0,
                       calibration=calibration)
        placed.run(x, seed=3)
        noise = placed.parts[0]
        assert isinstance(noise, SiteNoise) and noise.site == "inputs"
        assert noise.noise > 0 and abs(noise.measured_db - db) < 0.5, (db, noise.measured_db)


def test_mamba2_with_the_noise_off_is_its_run_without_the_wrapper(lm) -> None:
    """inf dB through the wrapper (its parts attached, drawing nothing) is the kind's own run bit for bit, on
    tiles with the device's noise too; a finite dB changes it, the same seed giving the same bits."""
    model, x, calibration = lm
    for options in ({"on_tiles": "none"}, {"on_tiles": "out_proj"}):
        plain = place(model, "aoc48", options, chip=0, calibration=calibration)
        off = place(model, "aoc48", {**options, "snr_db": math.inf}, chip=0, calibration=calibration)
        assert isinstance(off, NoiseInjected) and not isinstance(plain, NoiseInjected)
        a, b = plain.run(x, seed=2), off.run(x, seed=2)
        assert torch.equal(a.outputs, b.outputs) and torch.equal(a.z, b.z)
        noisy = place(model, "aoc48", {**options, "snr_db": 20.0, "snr_convention": "elementwise"}, chip=0,
                      calibration=calibration)
        first, again = noisy.run(x, seed=2), noisy.run(x, seed=2)
        assert torch.equal(first.outputs, again.outputs) and not torch.equal(first.z, a.z)
        assert torch.equal(first.z[:, 0], a.z[:, 0])  # 'elementwise': the first token noise-free


def _cases() -> list[tuple[str, str, dict, torch.Tensor, object]]:
    """(model, device, placement, inputs, calibration): one per bundled kind, small."""
    digits, twin = default_workload(load_model("digits-deq48")), default_workload(load_model("digits-twin48"))
    text = default_workload(load_model("charlm-mamba2"), sequences=2, length_factor=1)
    return [("digits-deq48", "aoc48", {"fit": False}, digits.inputs[:4], None),
            ("digits-deq48", "aoc16", {"max_iter": 5}, digits.inputs[:4], digits.calibration[:64]),
            ("parity-implicit", "aoc48", {"on_tiles": "out_proj", "max_iter": 4}, PARITY, PARITY),
            ("digits-twin48", "aoc48", {}, twin.inputs[:4], None),
            ("charlm-mamba2", "aoc48", {"on_tiles": "out_proj"}, text.inputs[:, :16], text.calibration)]


@pytest.mark.slow
def test_every_kind_builds_its_machine_from_the_run_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the base's `run_profile` turned into the profile without noise, every bundled kind runs as it does
    placed on that profile (bit for bit) and records the keys it changed (`run_overrides`); a kind that built
    any part of its machine (a fit, a load, a loop) from the profile it was placed on would run noisy."""
    cases = _cases()
    expected = [place(load_model(name), without_noise(resolve_profile(device, 0)), placement,
                      calibration=calibration).run(x, 1) for name, device, placement, x, calibration in cases]
    monkeypatch.setattr(PlacedModel, "run_profile", property(lambda self: without_noise(self.profile)))
    kinds = set()
    for (name, device, placement, x, calibration), quiet in zip(cases, expected):
        placed = place(load_model(name), device, placement, chip=0, calibration=calibration)
        kinds.add(placed.kind)
        run = placed.run(x, 1)
        assert torch.equal(run.outputs, quiet.outputs) and torch.equal(run.z, quiet.z), (name, device)
        assert placed.run_overrides().get("noise.multiplier") == 0.0, (name, device)
    assert kinds == {"native DEQ", "tiled DEQ", "hybrid SSM", "twin DEQ", "hybrid Mamba2"}


def test_generation_on_a_device_refuses_the_noise_options_in_one_line() -> None:
    """Token-by-token generation runs the device's own noise; the wrapper's parts key by a whole run, so the
    options are refused (they were ignored before the wrapper), before any placement work."""
    from aocsim.experiments.generate import DeviceNextLogits

    with pytest.raises(InputError, match=r"^placement sets snr_db = 20\.0; generation on a device") as error:
        DeviceNextLogits(load_model("parity-implicit"), "aoc48", max_length=8, placement={"snr_db": 20.0})
    assert "\n" not in str(error.value)
