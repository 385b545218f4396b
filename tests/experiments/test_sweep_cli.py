"""The sweep command line as a researcher meets it (issue 26): numbers without Python (a table per point
at the end of a sweep and in `sweep status`, `sweep show`), a word before a huge grid, `aocsim plot`
right after a sweep, a misspelt subcommand, a spec's device file found next to the spec."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import yaml
from click.testing import CliRunner

from aocsim.cli import main
from aocsim.experiments.sweep.table import point_table

ROOT = Path(__file__).resolve().parents[2]
TINY = {"model": "digits-deq48", "device": "aoc48", "data": {"samples": 8}, "axes": {"slm.bits": [9, 4]},
        "seeds": 2, "chips": 1, "metrics": ["accuracy", "agreement", "energy_per_inference_j"]}


def cli(*args: str):
    return CliRunner().invoke(main, ["--threads", "1", *args])


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> tuple[Path, str]:
    """TINY run by `aocsim sweep`: its folder and what it printed."""
    folder = tmp_path_factory.mktemp("tiny")
    (folder / "tiny.yaml").write_text(yaml.safe_dump(TINY, sort_keys=False))
    out = cli("sweep", str(folder / "tiny.yaml"), "--out", str(folder / "run"), "--workers", "1")
    assert out.exit_code == 0, out.output
    return folder / "run", out.output


def _table(text: str, first: str) -> list[list[str]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == [first])
    return [line.split() for line in lines[start + 1:] if line.strip() and line.split()[0][0].isdigit()]


def test_a_sweep_ends_with_a_table_of_its_points(swept: tuple[Path, str]) -> None:
    folder, printed = swept
    with xr.open_dataset(folder / "results.nc", engine="h5netcdf") as ds:
        accuracy = 100 * ds.accuracy.mean(("chip", "seed")).sel(model="digits-deq48")
        rows = _table(printed, "slm.bits")
        assert [int(r[0]) for r in rows] == [9, 4]  # the spec's order
        for r in rows:
            assert float(r[1]) == pytest.approx(float(accuracy.sel({"slm.bits": int(r[0])})), abs=0.006)
    assert "accuracy (%)" in printed and re.search(r"\d uJ", printed)  # each energy with its own SI prefix


def test_status_tables_the_points_done_so_far(swept: tuple[Path, str], tmp_path: Path) -> None:
    folder, _ = swept
    partial = tmp_path / "partial"
    shutil.copytree(folder, partial)
    (partial / "results.nc").unlink()
    point = sorted((partial / "points").glob("*.nc"))[0]
    point.unlink()
    out = cli("sweep", "status", str(partial))
    assert out.exit_code == 0, out.output
    assert "1 of 2 points done (50 %)" in out.output
    assert len(_table(out.output, "slm.bits")) == 1


def test_many_points_show_the_first_and_best_few_and_say_how_many_are_left_out() -> None:
    ds = xr.Dataset({"accuracy": (("model", "noise.multiplier", "chip", "seed"),
                                  np.linspace(0, 1, 30).reshape(1, 30, 1, 1))},
                    coords={"model": ["m"], "noise.multiplier": np.arange(30.0), "chip": [0], "seed": [0]})
    text = point_table(ds, limit=12, few=5)
    shown = [float(line.split()[0]) for line in text.splitlines()[2:] if line.strip()[0].isdigit()]
    assert shown == [0, 1, 2, 3, 4, 25, 26, 27, 28, 29]
    assert "20 of 30 points left out" in text


def test_show_answers_one_question(swept: tuple[Path, str]) -> None:
    folder, _ = swept
    out = cli("sweep", "show", str(folder), "--metric", "agreement", "--by", "slm.bits")
    assert out.exit_code == 0, out.output
    with xr.open_dataset(folder / "results.nc", engine="h5netcdf") as ds:
        agree = 100 * ds.agreement.sel(model="digits-deq48")
        rows = _table(out.output, "slm.bits")
        assert [int(r[0]) for r in rows] == [4, 9]  # sorted by the axis
        for r in rows:
            one = agree.sel({"slm.bits": int(r[0])})
            assert r[2] == "+-"
            assert float(r[1]) == pytest.approx(float(one.mean()), abs=0.006)
            assert float(r[3]) == pytest.approx(float(one.std()), abs=0.006)
    for args, message in ((["--metric", "speed"], "--metric 'speed' is not in the results; expected one of accuracy"),
                          (["--metric", "accuracy", "--by", "slm.bitz"], "--by 'slm.bitz' is not an axis"),
                          (["--metric", "accuracy", "--at", "slm.bits=7"], "--at slm.bits=7: not a value")):
        bad = cli("sweep", "show", str(folder), *args)
        assert bad.exit_code == 1 and message in bad.output and bad.output.count("\n") == 1, bad.output


def test_show_reads_a_results_file_with_other_axes_listed_or_fixed() -> None:
    results = ROOT / "docs" / "sweeps" / "digits-bits.nc"
    out = cli("sweep", "show", str(results), "--metric", "accuracy", "--by", "readout.adc_bits")
    assert out.exit_code == 0, out.output
    assert len(_table(out.output, "readout.adc_bits")) == 200  # every point: the other axes listed beside
    fixed = cli("sweep", "show", str(results), "--metric", "accuracy", "--by", "readout.adc_bits",
                "--at", "slm.bits=9", "--at", "noise.multiplier=1")
    rows = _table(fixed.output, "readout.adc_bits")
    assert [int(r[0]) for r in rows] == [4, 6, 8, 10, 12]


def test_plot_works_right_after_a_sweep_and_never_overwrites(swept: tuple[Path, str]) -> None:
    folder, printed = swept
    first = cli("plot", str(folder / "results.nc"))
    assert first.exit_code == 0, first.output  # before: "--out .../results.png exists" (the sweep had drawn it)
    assert f"aocsim plot {folder / 'results.nc'}" in printed  # the sweep says how to draw it
    again = cli("plot", str(folder / "results.nc"))
    assert again.exit_code == 1 and "exists; pass --overwrite" in again.output


@pytest.mark.slow
def test_a_huge_grid_needs_yes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = {**TINY, "axes": {"slm.bits": list(range(2, 10)), "readout.adc_bits": list(range(1, 25)),
                            "noise.multiplier": [1, 2, 4, 8, 16, 32]}}
    spec = tmp_path / "big.yaml"
    spec.write_text(yaml.safe_dump(big))
    import aocsim.experiments.sweep as sweeps

    started = []

    def start(*args, **kwargs):  # instead of running 1152 points: note the start and stop there
        started.append(args)
        raise SystemExit(3)

    monkeypatch.setattr(sweeps, "sweep", start)
    out = cli("sweep", str(spec), "--out", str(tmp_path / "big"), "--workers", "2")
    assert not started, "the sweep started without --yes"
    assert out.exit_code == 1 and out.output.count("\n") == 1, out.output
    assert re.search(r"1152 points x 1 chips x 2 seeds; about [\d.]+ (minutes|hours) on 2 workers", out.output)
    assert "pass --yes to start it" in out.output
    assert not (tmp_path / "big").exists()
    assert cli("sweep", str(spec), "--out", str(tmp_path / "big"), "--yes").exit_code == 3 and started


@pytest.mark.parametrize("model, task", [("digits-deq48", "digits"), ("parity-implicit", "state_tracking")])
def test_the_time_estimate_charges_a_setup_per_chip_of_every_point(model: str, task: str) -> None:
    """Guards against the sweep's time estimate charging the placement (fitting or compiling the tile programs)
    once per point instead of once per chip (issue 41, finding 9d): 2 chips x 1 seed make as many runs as
    1 chip x 2 seeds, and take one setup more per point."""
    from aocsim.experiments.sweep import parse_spec
    from aocsim.experiments.sweep.estimate import SETUP_S, estimate

    def seconds(chips: int, seeds: int, workers: int = 1) -> float:
        spec = parse_spec({**TINY, "model": model, "data": {}, "chips": chips, "seeds": seeds})
        return estimate(spec, 10, workers).seconds

    assert seconds(2, 1) - seconds(1, 2) == pytest.approx(10 * SETUP_S[task])
    assert seconds(2, 1, workers=2) == pytest.approx(seconds(2, 1) / 2)


def test_a_misspelt_subcommand_is_named(tmp_path: Path) -> None:
    out = cli("sweep", "statsu", str(tmp_path))
    assert out.exit_code == 2 and "No such command 'statsu'" in out.output and "status" in out.output
    assert "--out" not in out.output
    missing = cli("sweep", str(tmp_path / "nope.yaml"), "--out", str(tmp_path / "o"))
    assert missing.exit_code == 1 and "no such file" in missing.output


def test_a_spec_device_file_is_found_next_to_the_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from aocsim.experiments.sweep import load_spec
    from aocsim.paths import devices_dir

    studies = tmp_path / "studies"
    studies.mkdir()
    (studies / "my48.yaml").write_text((devices_dir() / "aoc48.yaml").read_text())
    (studies / "s.yaml").write_text(yaml.safe_dump({**TINY, "device": "my48.yaml"}))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    spec = load_spec(Path("..") / "studies" / "s.yaml")
    assert spec.device == "my48.yaml"  # as written: a point's key does not depend on where the spec lies
    assert Path(spec.device_path) == (studies / "my48.yaml").resolve()


@pytest.mark.slow
def test_the_worked_example_of_the_docs_runs_on_small_specs(tmp_path: Path) -> None:
    """docs/SWEEPS.md section 5 answers a researcher's question with the CLI only; its commands run here as
    written, on the two specs cut to the first and last value of each axis and a few inputs."""
    import shlex

    text = (ROOT / "docs" / "SWEEPS.md").read_text()
    block = text.split("<!-- worked example:", 1)[1].split("-->", 1)[1]
    commands = [line.strip() for line in block.split("\n\n", 2)[1].splitlines()]
    assert len(commands) == 6 and all(c.startswith("aocsim ") for c in commands)
    small = {"parity-shot-noise.yaml": {"data": {"sequences": 1, "length_factor": 1}, "seeds": 1, "chips": 1},
             "digits-bits.yaml": {"data": {"samples": 8}, "seeds": 1}}
    for name, change in small.items():
        spec = yaml.safe_load((ROOT / "notebooks" / "sweeps" / name).read_text())
        spec["axes"] = {k: [v[0], v[-1]] if len(v) > 1 else v for k, v in spec["axes"].items()}
        (tmp_path / name).write_text(yaml.safe_dump({**spec, **change}))
    outputs = []
    for command in commands:
        args = [a.replace("notebooks/sweeps/", f"{tmp_path}/").replace("runs/", f"{tmp_path}/runs/")
                for a in shlex.split(command)[1:]]
        out = cli(*args)
        assert out.exit_code == 0, (command, out.output)
        outputs.append(out.output)
    assert outputs[0].splitlines() == ["noise.power_per_unit_w = 0.0001 W", "slm.bits = 9", "readout.adc_bits = 12"]
    power = _table(outputs[2], "noise.power_per_unit_w")
    assert [r[:2] for r in power] == [["1", "uW"], ["1", "mW"]] and float(power[1][2]) == 100.0
    bits = _table(outputs[5], "slm.bits")
    assert [r[0] for r in bits] == ["2", "9"] and all(r[1] == "readout" for r in bits)


def test_sweep_help_documents_the_search_block_and_every_metric() -> None:
    """Issue 41, finding 3: `sweep --help` never mentioned `search:`."""
    from aocsim.experiments.metrics import METRICS

    text = " ".join(cli("sweep", "--help").output.split())
    assert "search:" in text and "space:" in text and ">= 99 %" in text and "refused before any trial" in text
    assert all(m in text for m in METRICS)


def test_a_rate_setting_is_printed_without_a_prefix_on_its_unit() -> None:
    """A hold droop of 1000 per second reads '1000 /s', not '1 k1/s'."""
    from aocsim.experiments.sweep.table import _value

    assert _value(1000.0, "1/s") == "1000 /s" and _value(3e-5, "W") == "30 uW"
