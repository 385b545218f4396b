"""Output paths, overwrite permission and plot formats are checked before any long work starts."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from aocsim.cli import main
from aocsim.errors import InputError
from aocsim.io.outputs import check_output_dir, check_output_file, check_writable_folder


@pytest.fixture
def no_long_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make training and state-tracking evaluation fail loudly if they are reached."""
    from aocsim.train import recipes

    def reached(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the long work started before the output path was checked")

    monkeypatch.setattr(recipes, "RECIPES", {name: reached for name in recipes.RECIPES})
    monkeypatch.setattr("aocsim.train.state_tracking.evaluate_lengths", reached)


def _one_line_error(args: list[str], message: str) -> None:
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 1, out.output
    assert out.output.strip() == f"Error: {message}"


def test_train_into_a_file_fails_before_training(no_long_work: None) -> None:
    _one_line_error(["train", "digits-deq48", "--out", "/etc/passwd/x"],
                    "--out = '/etc/passwd/x': /etc/passwd is a file, not a folder; expected a path in a folder")


def test_train_into_an_existing_folder_needs_force(no_long_work: None, tmp_path: Path) -> None:
    _one_line_error(["train", "digits-deq48", "--out", str(tmp_path)],
                    f"--out = '{tmp_path}' exists; refusing to overwrite it (pass --force / overwrite=True)")
    _one_line_error(["train", "parity-implicit", "--out", str(tmp_path), "--steps", "1"],
                    f"--out = '{tmp_path}' exists; refusing to overwrite it (pass --force / overwrite=True)")


def test_train_where_nothing_can_be_written_fails_before_training(no_long_work: None) -> None:
    out = CliRunner().invoke(main, ["train", "digits-deq48", "--out", "/proc/aocsim-model"])
    assert out.exit_code == 1 and out.output.startswith("Error: --out = '/proc/aocsim-model': cannot write in /proc (")


@pytest.mark.parametrize(("plot", "message"), [
    ("out.txt", "--plot = 'out.txt': unknown format '.txt'; expected a file name ending in .png, .svg, .pdf"),
    ("plot", "--plot = 'plot': unknown format '(no suffix)'; expected a file name ending in .png, .svg, .pdf"),
    ("/etc/passwd/x.png", "--plot = '/etc/passwd/x.png': /etc/passwd is a file, not a folder; expected a path "
                          "in a folder"),
])
def test_evaluate_checks_the_plot_before_evaluating(no_long_work: None, plot: str, message: str) -> None:
    _one_line_error(["evaluate", "parity-implicit", "--plot", plot], message)


def test_evaluate_plot_in_proc_fails_before_evaluating(no_long_work: None) -> None:
    out = CliRunner().invoke(main, ["evaluate", "parity-implicit", "--plot", "/proc/x.png"])
    assert out.exit_code == 1 and out.output.startswith("Error: --plot = '/proc/x.png': cannot write in /proc (")


def test_library_checks(tmp_path: Path) -> None:
    assert check_output_dir(tmp_path / "a" / "b", overwrite=False) == tmp_path / "a" / "b"
    assert not (tmp_path / "a").exists()  # the probe leaves nothing behind
    assert check_output_dir(tmp_path, overwrite=True) == tmp_path
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="is a file; expected a folder to replace"):
        check_output_dir(tmp_path / "f", overwrite=True)
    with pytest.raises(InputError, match="is a file; expected a folder$"):
        check_writable_folder(tmp_path / "f")
    assert check_output_file(tmp_path / "new" / "p.SVG") == tmp_path / "new" / "p.SVG"
    (tmp_path / "d.png").mkdir()
    with pytest.raises(InputError, match="is a folder; expected a file name"):
        check_output_file(tmp_path / "d.png")
    assert sorted(os.listdir(tmp_path)) == ["d.png", "f"]


def test_library_run_checks_before_training(no_long_work: None, tmp_path: Path) -> None:
    from aocsim.train import run

    with pytest.raises(InputError, match="out_dir = .* exists; refusing to overwrite it"):
        run("digits-deq48", tmp_path)


@pytest.mark.parametrize("bad", ["a\x00b", "x" * 300 + ".png", ""])
def test_paths_the_os_cannot_look_up_are_one_line_errors(bad: str) -> None:
    for check in (lambda: check_output_dir(bad, overwrite=False, what="--out"),
                  lambda: check_output_file(bad, what="--out"), lambda: check_writable_folder(bad, what="--out")):
        with pytest.raises(InputError, match=r"^--out = .*; expected a file system path \(no NUL byte"):
            check()


def test_cli_paths_with_a_nul_byte_are_usage_errors() -> None:
    for args in (["train", "digits-deq48", "--out", "a\x00b"], ["evaluate", "parity-implicit", "--plot", "\x00.png"],
                 ["models", "table", "\x00"]):
        out = CliRunner().invoke(main, args)
        assert out.exit_code == 2 and "contains a NUL byte; expected a file system path" in out.output, out.output


# -- one rule for every --out and --plot: missing folders are created (issue 41, finding 4) --------------

ROOT = Path(__file__).resolve().parents[2]
FAST_COMPARE = ["--threads", "1", "compare", "parity-implicit", "--device", "ideal", "--on-tiles", "none",
                "--snr-db", "20", "--chips", "1", "--seeds", "1", "--sequences", "2", "--length-factor", "1"]


def test_plot_creates_the_missing_folders_of_its_figure(tmp_path: Path) -> None:
    out = tmp_path / "missing" / "sub" / "x.png"
    result = CliRunner().invoke(main, ["plot", str(ROOT / "docs" / "sweeps" / "digits-bits.nc"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"wrote {out}" and out.read_bytes()[:4] == b"\x89PNG"


def test_compare_out_creates_the_missing_folders(tmp_path: Path) -> None:
    out = tmp_path / "missing" / "r.nc"
    result = CliRunner().invoke(main, [*FAST_COMPARE, "--torch-device", "cpu", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.is_file() and out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"  # the --plot default beside it


def test_sweep_plot_that_cannot_be_written_is_refused_before_any_point(tmp_path: Path) -> None:
    import yaml

    spec = tmp_path / "one.yaml"
    spec.write_text(yaml.safe_dump({"model": "digits-deq48", "device": "aoc48", "data": {"samples": 8},
                                    "axes": {"slm.bits": [9]}, "seeds": 1, "chips": 1, "metrics": ["accuracy"]}))
    (tmp_path / "somefile").write_text("mine")
    plot = tmp_path / "somefile" / "x.png"
    result = CliRunner().invoke(main, ["--threads", "1", "sweep", str(spec), "--out", str(tmp_path / "run"),
                                       "--workers", "1", "--plot", str(plot)])
    assert result.exit_code == 1
    assert result.output.strip() == (f"Error: --plot = '{plot}': {tmp_path / 'somefile'} is a file, not a folder; "
                                     "expected a path in a folder")
    assert not (tmp_path / "run").exists() and (tmp_path / "somefile").read_text() == "mine"


def test_every_output_option_says_the_same_rule_in_its_help() -> None:
    for command, options in [("compare", ("--out", "--plot")), ("sweep run", ("--out", "--plot")), ("plot", ("--out",)),
                             ("train", ("--out",)), ("evaluate", ("--plot",))]:
        cmd: Any = main
        for word in command.split():
            cmd = cmd.commands[word]
        for option in options:
            param = next(p for p in cmd.params if option in getattr(p, "opts", ()))
            assert "missing folders are created" in " ".join(param.help.split()), (command, option)
