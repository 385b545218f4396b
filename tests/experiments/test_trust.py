"""Results that cannot be trusted are flagged where printed and stored (issue 26, findings 1 and 6).

A device run at chance, with agreement far below the model's own accuracy, or with most solves
"converged" at chance, gets a one-line note naming the likely cause under the printed summary and
`trusted = 0` with the notes in the Dataset's attributes; a sound run gets neither. The printed
summary defines its terms (agreement, each status with the tolerance the run used).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

from aocsim.cli import main
from aocsim.experiments.results import summarize
from aocsim.experiments.trust import chance_band, trust_notes
from aocsim.solve.result import SolveStatus


def _compare_like(correct_share: float, status: SolveStatus, *, kind: str = "hybrid SSM", classes: int = 2,
                  device: str = "aoc16") -> xr.Dataset:
    """A sequence model's compare Dataset (2 chips x 2 seeds x 8 sequences x 64 tokens), exact path right
    everywhere, the device right on `correct_share` of the tokens and every solve ending with `status`."""
    rng = np.random.default_rng(0)
    shape = (2, 2, 8, 64)
    targets = rng.integers(0, classes, shape[2:])
    right = rng.random(shape) < correct_share
    device_pred = np.where(right, targets, (targets + 1) % classes)
    pred = np.stack([np.broadcast_to(targets, shape), device_pred])
    dims = ("path", "chip", "seed", "sample", "position")
    ds = xr.Dataset({"prediction": (dims, pred), "correct": (dims, pred == targets),
                     "agreement": (dims[1:], pred[1] == pred[0]),
                     "status": (dims, np.full((2, *shape), status.value)),
                     "iterations": (dims, np.full((2, *shape), 7)), "residual": (dims, np.full((2, *shape), 0.01)),
                     "hardware_time_s": (dims, np.full((2, *shape), 1e-6)),
                     "energy_j": (dims[1:], np.full(shape, 1e-6))},
                    coords={"path": ["exact", "device"]})
    ds.attrs.update({"model": "m", "device": device, "kind": kind, "classes": classes,
                     "placement.rtol": 0.1, "placement.mode": "sequential"})
    ds["residual"].attrs["units"] = "relative"
    return ds


def test_a_chance_answer_with_most_solves_converged_is_flagged_with_its_cause() -> None:
    """What aocsim compare parity-implicit --device aoc16 gave: ~50 % on 2 classes, every solve 'converged'."""
    notes = summarize(_compare_like(0.5, SolveStatus.CONVERGED))["warnings"]
    assert len(notes) == 3
    chance, agreement, status = notes
    assert "is at chance (1/2 = 50.0 %" in chance and "exact path has 100.00 %" in chance
    assert "more than 10 points below the model's own accuracy 100.00 %" in agreement
    assert "100 % of the device solves converged" in status
    for note in notes:
        assert "\n" not in note and "likely cause: tile programs that did not calibrate on aoc16" in note
        assert "docs/DEVICE_RUNS.md section 1b" in note and "try --device aoc48" in note
    ds = _compare_like(0.5, SolveStatus.CONVERGED)
    ds.attrs["device"] = "aoc48"  # on aoc48 itself, no advice to move to it
    for note in summarize(ds)["warnings"]:
        assert "did not calibrate on aoc48 (docs/DEVICE_RUNS.md section 1b)" in note
        assert "aoc48 only today" not in note and "try --device" not in note


def test_with_no_map_on_tiles_the_cause_is_the_noise_set_not_the_tiles() -> None:
    """The abstract noise model (on_tiles none) has no tile program to blame: the reference grid's 0 dB points
    named tiles that did not calibrate on aoc48 before (seen failing with the default cause)."""
    ds = _compare_like(0.5, SolveStatus.CONVERGED)
    ds.attrs.update({"kind": "hybrid SSM", "maps_on_tiles": ""})
    notes = trust_notes(ds)
    assert notes and all("likely cause: the noise the snr_* options set (no map runs on tiles" in n for n in notes)
    ds.attrs["maps_on_tiles"] = "blocks.0.in_proj"
    assert all("tile programs that did not calibrate" in n for n in trust_notes(ds))


def test_sound_results_and_results_off_by_less_than_the_gap_are_not_flagged() -> None:
    assert trust_notes(_compare_like(1.0, SolveStatus.CONVERGED)) == []
    assert trust_notes(_compare_like(0.95, SolveStatus.MAX_ITER)) == []
    # far below the model but not at chance: only the agreement note, and its cause names the statuses
    notes = trust_notes(_compare_like(0.8, SolveStatus.MAX_ITER, kind="native DEQ", classes=10))
    assert len(notes) == 1 and "more than 10 points below" in notes[0] and "stopped without converging" in notes[0]


def test_the_chance_band_is_the_wider_of_three_standard_errors_and_five_points() -> None:
    assert chance_band(2, 100) == pytest.approx(3 * 0.5 / 10)
    assert chance_band(2, 100_000) == 0.05
    assert chance_band(10, 45) == pytest.approx(3 * (0.09 / 45) ** 0.5)


def test_the_cli_prints_the_note_and_stores_the_flag(tmp_path: Path) -> None:
    """Digits under 1e5 times aoc48's noise: 8.9 % device accuracy (chance 10 %), exit code 0 without a word before."""
    out = tmp_path / "r.nc"
    result = CliRunner().invoke(main, ["--threads", "1", "compare", "digits-deq48", "--set", "noise.multiplier=1e5",
                                       "--seeds", "1", "--chips", "1", "--max-iter", "30", "--out", str(out)])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if line.strip().startswith("WARNING")]
    assert len(warnings) == 2 and "is at chance (1/10 = 10.0 %" in warnings[0]
    assert "more than 10 points below the model's own accuracy" in warnings[1]
    assert all("likely cause: noise swamps the state" in w for w in warnings)
    with xr.open_dataset(out, engine="h5netcdf") as ds:
        assert ds.attrs["trusted"] == 0 and ds.attrs["classes"] == 10
        assert ds.attrs["warnings"].split("\n") == [w.strip().removeprefix("WARNING ") for w in warnings]


def test_the_summary_defines_its_terms_with_the_tolerance_used(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["--threads", "1", "compare", "digits-deq48", "--device", "aoc48-twin",
                                       "--seeds", "1", "--chips", "1", "--rtol", "2e-5", "--out",
                                       str(tmp_path / "r.nc")])
    assert result.exit_code == 0, result.output
    text = result.output
    assert "WARNING" not in text
    terms = {line.split()[0]: line for line in text.splitlines()[text.splitlines().index("  where"):]
             if line.startswith("    ")}
    assert "device prediction == exact prediction" in terms["agreement"]
    assert "||f(z) - z|| <= atol 1e-06 + rtol 2e-05 ||f(z)||" in terms["converged"]
    assert "device volts" in terms["converged"]  # the tolerance's units: the loop's state natively
    assert "2000 iterations" in terms["max_iter"]
    assert {"noise_floor", "diverged"} <= set(terms)
    with xr.open_dataset(tmp_path / "r.nc", engine="h5netcdf") as ds:
        assert ds.attrs["trusted"] == 1 and ds.attrs["warnings"] == ""


@pytest.mark.slow
def test_tiles_that_did_not_calibrate_are_flagged_by_the_placement_itself() -> None:
    """Parity on aoc16: the tile programs do not converge there (docs/DEVICE_RUNS.md 1b); the Dataset
    carries the worst program's matrix error and the check names it, whatever the answers."""
    from aocsim import compare, load_model
    from aocsim.experiments.trust import trust_attributes
    from aocsim.experiments.workloads import default_workload

    model = load_model("parity-implicit")
    w = default_workload(model, sequences=1, length_factor=1)
    ds = compare(model, "aoc16", w.inputs, calibration=w.calibration, placement={"max_iter": 2})
    assert ds.attrs["max_program_error"] > 0.5
    attrs = trust_attributes(ds)  # no targets: only the placement's own check
    assert attrs["trusted"] == 0 and "the tile programs did not calibrate on aoc16: matrix error" in attrs["warnings"]
    assert ds.attrs["trusted"] == 0 and ds.attrs["warnings"] == attrs["warnings"]  # stored as compare returns it
    good = compare(model, "aoc48", w.inputs, calibration=w.calibration, placement={"max_iter": 2})
    assert good.attrs["max_program_error"] < 0.5 and trust_attributes(good)["trusted"] == 1


def test_the_calibration_check_reads_the_worst_chip_not_the_last(monkeypatch: pytest.MonkeyPatch) -> None:
    """Guards against compare keeping the last chip's tile-program error (or the first's) instead of the
    worst chip's (issue 41, finding 9b): over three chips, only the middle one's programs did not calibrate,
    and the compare is still flagged. The chips' errors are set through the placement's own `program_error`,
    where compare reads each chip's."""
    from aocsim import compare, load_model
    from aocsim.execute.tiled import TiledDEQ
    from aocsim.experiments.workloads import default_workload

    errors = {0: 0.2, 1: 0.9, 2: 0.1}  # chip (variation.chip_seed) -> the matrix error of its tile programs
    monkeypatch.setattr(TiledDEQ, "program_error",
                        property(lambda self: errors[self.profile.values["variation.chip_seed"]]))
    model = load_model("digits-deq48")  # on aoc16's 16 channels: on tiles
    w = default_workload(model)
    ds = compare(model, "aoc16", w.inputs[:2], chips=(0, 1, 2), placement={"max_iter": 2})
    assert ds.attrs["kind"] == "tiled DEQ" and ds.attrs["max_program_error"] == 0.9
    assert ds.attrs["trusted"] == 0
    note = "the tile programs did not calibrate on aoc16: matrix error 90 % (above 50 %)"
    assert ds.attrs["warnings"].startswith(note)
