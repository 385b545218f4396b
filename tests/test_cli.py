"""The `aocsim` command line: version, help, evaluation, training, errors."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from aocsim import __version__, load_model
from aocsim.cli import main


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_version_and_help() -> None:
    assert run("--version").output.strip() == f"aocsim, version {__version__}"
    out = run("--help")
    assert out.exit_code == 0 and "evaluate" in out.output and "train" in out.output


def test_evaluate_bundled_default_prints_accuracy_and_convergence() -> None:
    out = run("evaluate")
    assert out.exit_code == 0, out.output
    line = next(x for x in out.output.splitlines() if "accuracy" in x)
    assert float(line.split()[-1]) >= 0.95
    assert "iterations" in out.output and "converged" in out.output


def test_unknown_model_is_a_one_line_error() -> None:
    out = run("evaluate", "nope")
    assert out.exit_code == 1
    assert out.output.strip().splitlines() == [
        "Error: unknown model (neither a bundled name nor a directory) 'nope'; known: digits-deq48"]


def test_unknown_recipe_is_a_one_line_error() -> None:
    out = run("train", "mnist-huge")
    assert out.exit_code == 1 and "unknown recipe 'mnist-huge'; known: digits-deq48" in out.output


def test_train_writes_a_loadable_model_and_never_overwrites(tmp_path: Path) -> None:
    target = tmp_path / "m"
    out = run("train", "digits-deq48", "--out", str(target), "--epochs", "2", "--seed", "3")
    assert out.exit_code == 0, out.output
    model = load_model(target)
    assert model.card["seed"] == 3 and model.card["training"]["epochs"] == 2
    assert model.card["metrics"]["test"]["accuracy"] > 0.8
    before = (target / "weights.h5").read_bytes()
    again = run("train", "digits-deq48", "--out", str(target), "--epochs", "1")
    assert again.exit_code == 1 and "refusing to overwrite" in again.output
    assert (target / "weights.h5").read_bytes() == before


def test_models_list() -> None:
    out = run("models", "list")
    assert out.exit_code == 0 and "digits-deq48" in out.output
