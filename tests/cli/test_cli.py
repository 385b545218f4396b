"""The `aocsim` command line: version, help, evaluation, training, errors."""

from __future__ import annotations

from pathlib import Path

import pytest
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
    lines = out.output.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("Error: unknown model (neither a bundled name nor a directory) 'nope'; known: ")
    assert "digits-deq48" in lines[0] and "parity-implicit" in lines[0]


def test_unknown_recipe_is_a_one_line_error() -> None:
    out = run("train", "mnist-huge")
    assert out.exit_code == 1 and "unknown recipe 'mnist-huge'; known: a5-explicit1" in out.output


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


def test_devices_list_and_show_with_budget() -> None:
    out = run("devices", "list")
    assert out.exit_code == 0
    assert [line.split()[0] for line in out.output.splitlines()] == ["aoc-projected", "aoc16", "aoc16-twin", "aoc48",
                                                                     "aoc48-twin", "ideal"]
    show = run("devices", "show", "aoc48")
    assert show.exit_code == 0
    for source in ("shot noise", "thermal (TIA) noise", "LED RIN", "SLM quantisation (9 bits)", "total"):
        assert source in show.output
    assert "weight load  5 ms, 415 nJ" in show.output  # what a time-multiplexed placement pays per load
    six = run("devices", "show", "aoc48", "--set", "slm.bits=6")
    assert "SLM quantisation (6 bits)" in six.output


def test_devices_errors_are_one_line() -> None:
    out = run("devices", "show", "aoc48", "--set", "slm.bits=banana")
    assert out.exit_code == 1 and out.output.strip() == "Error: overrides: slm.bits = 'banana'; expected a finite integer"
    out = run("devices", "show", "nope")
    assert out.exit_code == 1 and "known: aoc-projected, aoc16, aoc16-twin, aoc48, aoc48-twin, ideal" in out.output
    out = run("devices", "show", "aoc48", "--set", "slm.bits")
    assert out.exit_code == 2 and "expected KEY=VALUE" in out.output


def test_bench_loop_runs_and_checks_the_two_implementations_agree() -> None:
    out = run("bench", "loop", "--batch", "4", "--iterations", "3", "--repeats", "1", "--no-compiled")
    assert out.exit_code == 0, out.output
    rows = [line.split() for line in out.output.splitlines() if line.startswith(("deterministic", "all noise"))]
    assert len(rows) == 2
    assert float(rows[0][5]) < 1e-4  # folded and per-stage final states agree (float32): the max |diff| column


def test_recipe_options_that_do_not_apply_are_refused(tmp_path: Path) -> None:
    out = run("train", "parity-implicit", "--epochs", "3", "--out", str(tmp_path / "m"))
    assert out.exit_code == 1 and "recipe 'parity-implicit' does not take option(s)" in out.output
    assert not (tmp_path / "m").exists()


@pytest.mark.slow
def test_evaluate_state_tracking_model_prints_both_modes_and_plots(tmp_path: Path) -> None:
    from aocsim.io.model_files import bundled_models

    if "parity-implicit" not in bundled_models():
        import pytest

        pytest.skip("parity model not bundled")
    plot = tmp_path / "acc.png"
    out = run("evaluate", "parity-implicit", "--batch", "16", "--plot", str(plot))
    assert out.exit_code == 0, out.output
    assert out.output.count("simultaneous") == 3 and out.output.count("sequential") == 3
    assert out.output.count("agreement") == 3
    assert plot.stat().st_size > 1000 and plot.read_bytes()[:4] == b"\x89PNG"
    wrong = run("evaluate", "parity-implicit", "--task", "A5")
    assert wrong.exit_code == 1 and "model card is for task 'Z2'" in wrong.output


def test_evaluate_compare_explicit_model_once_on_the_same_sequences(tmp_path: Path) -> None:
    from aocsim.io.model_files import bundled_models

    if not {"parity-implicit", "parity-explicit1", "a5-explicit1"} <= set(bundled_models()):
        pytest.skip("parity / A5 models not bundled")
    plot = tmp_path / "cmp.png"
    out = run("evaluate", "parity-implicit", "--batch", "4", "--factors", "1,2", "--uniform",
              "--compare", "parity-explicit1", "--plot", str(plot))
    assert out.exit_code == 0, out.output
    assert out.output.count("agreement") == 2  # the implicit model: both modes at 1L and 2L
    assert "model parity-explicit1 (explicit, 1 layer(s)), task parity, identity-token probability 0.5" in out.output
    assert "parity-explicit1 solves: 100%" in out.output and plot.read_bytes()[:4] == b"\x89PNG"
    # A model for another task fails before any evaluation; a bad --factors is a one-line usage error.
    other = run("evaluate", "parity-implicit", "--compare", "a5-explicit1", "--plot", str(tmp_path / "x.png"))
    assert other.exit_code == 1 and "expected parity at L = 16" in other.output and "lengths" not in other.output
    bad = run("evaluate", "parity-implicit", "--factors", "1,x")
    assert bad.exit_code == 2 and "Traceback" not in bad.output
    assert "Invalid value for --factors: '1,x'; expected integers from 1 to 1000" in bad.output


def test_bench_without_a_toolchain_says_how_to_skip_the_compiled_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    from aocsim.hardware.engine import backends

    def no_compiler(*args: object, **kwargs: object) -> None:
        raise RuntimeError("C++ compiler not found")

    monkeypatch.setattr(backends, "_compile", no_compiler)
    monkeypatch.setattr(backends, "GRAPHS", backends.GRAPHS.fresh())
    out = run("bench", "loop", "--batch", "2", "--iterations", "5", "--repeats", "1")
    assert out.exit_code == 1
    assert "could not compile the loop step (RuntimeError: C++ compiler not found)" in out.output
    assert "--no-compiled" in out.output and "Traceback" not in out.output


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["evaluate", "--help"], ["train", "--help"]])
def test_help_and_version_do_not_import_torch(args: list[str]) -> None:
    # torch costs seconds at start-up; --help and --version must not pay it (issue 12).
    import subprocess
    import sys

    code = ("import sys; from aocsim.cli import main\n"
            f"try: main({args!r}, prog_name='aocsim')\n"
            "except SystemExit as e: assert e.code == 0, e.code\n"
            "heavy = sorted(m for m in ('torch', 'numpy', 'h5py', 'matplotlib', 'yaml') if m in sys.modules)\n"
            "print('HEAVY', heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "HEAVY []", out.stdout


def test_lazy_package_exports_stay_usable() -> None:
    import torch

    import aocsim
    import aocsim.solve.core  # importing the subpackage must not shadow the function aocsim.solve

    assert callable(aocsim.solve) and aocsim.solve.__module__ == "aocsim.solve.core"
    res = aocsim.solve(lambda z: 0.5 * z + 1, torch.zeros(2, 3, dtype=torch.float64))
    assert res.all_converged and torch.allclose(res.z, torch.full((2, 3), 2.0, dtype=torch.float64))
    assert set(aocsim.__all__) <= set(dir(aocsim))
    for name in aocsim.__all__:
        assert getattr(aocsim, name) is not None
    assert aocsim.nn.ImplicitSSM.__name__ == "ImplicitSSM"  # subpackages as attributes, as before
    assert aocsim.hardware.__name__ == "aocsim.hardware"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        aocsim.nope


def test_set_reads_numbers_as_profile_files_do() -> None:
    # Issue 12: --set noise.bandwidth_hz=5e7 was refused while profile files accept 5e7.
    for value in ("5e7", "5.0e+7", "50000000"):
        out = run("devices", "show", "aoc48", "--set", f"noise.bandwidth_hz={value}")
        assert out.exit_code == 0, out.output
        assert "'noise.bandwidth_hz': 50000000" in out.output


def test_devices_show_prints_single_values_with_their_units() -> None:
    """What-ifs without files (issue 26, finding 8): `--key` prints a profile value with its schema unit."""
    out = run("devices", "show", "aoc48", "--key", "noise.power_per_unit_w", "--key", "slm.bits",
              "--key", "loop.round_trip_s")
    assert out.exit_code == 0, out.output
    assert out.output.splitlines() == ["noise.power_per_unit_w = 0.0001 W", "slm.bits = 9",
                                       "loop.round_trip_s = 2e-08 s"]
    what_if = run("devices", "show", "aoc48", "--set", "noise.power_per_unit_w=3e-6", "--key", "noise.power_per_unit_w")
    assert what_if.output.splitlines() == ["noise.power_per_unit_w = 3e-06 W"]
    bad = run("devices", "show", "aoc48", "--key", "noise.power_per_unit")
    assert bad.exit_code == 1 and bad.output.count("\n") == 1
    assert "--key 'noise.power_per_unit' is not a profile key (did you mean 'noise.power_per_unit_w'?)" in bad.output


# -- --device is a device profile everywhere, --torch-device the torch device (issue 41, finding 6) ------

def _no_cuda(monkeypatch: pytest.MonkeyPatch, available: bool = False) -> None:
    """torch.cuda.is_available() answers `available`; compare's and a sweep's work fail if they start."""
    import torch

    import aocsim.experiments.compare_models
    import aocsim.experiments.sweep

    def started(*args: object, **kwargs: object) -> None:
        raise AssertionError("the work started before --torch-device was checked")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(aocsim.experiments.compare_models, "compare_models", started)
    monkeypatch.setattr(aocsim.experiments.sweep, "sweep", started)


def test_a_torch_device_given_as_a_profile_names_the_torch_device_option() -> None:
    hint = "expected a device profile (a bundled name: aocsim devices list, or a .yaml file)"
    for args, line in [
        (["compare", "--device", "cuda"], f"--device = 'cuda' names a torch device; {hint}; did you mean "
                                          "--torch-device cuda?"),
        (["compare", "--device", "cpu"], f"--device = 'cpu' names a torch device; {hint}; did you mean "
                                         "--torch-device cpu?"),
        (["generate", "charlm-implicit", "--prompt", "a", "--device", "gpu"],
         f"--device = 'gpu' names a torch device; {hint}"),
        (["bench", "loop", "--device", "cuda:0"], f"--device = 'cuda:0' names a torch device; {hint}"),
        (["devices", "show", "cuda"], f"NAME = 'cuda' names a torch device; {hint}"),
        (["evaluate", "--device", "cuda"], "--device names a device profile in aocsim; for the torch device use "
                                           "--torch-device cuda"),
    ]:
        out = run(*args)
        assert out.exit_code == 1 and out.output == f"Error: {line}\n", out.output
    assert "--device" not in run("evaluate", "--help").output  # hidden: only there to say the line above


def test_torch_device_cuda_without_cuda_is_one_line_before_any_work(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    _no_cuda(monkeypatch)
    line = "Error: --torch-device cuda: no CUDA device is available to torch here; expected cpu\n"
    spec = tmp_path / "s.yaml"
    spec.write_text("model: digits-deq48\ndevice: aoc48\naxes: {slm.bits: [9]}\n")
    for args in (["evaluate", "--torch-device", "cuda"], ["compare", "--torch-device", "cuda", "--out",
                                                          str(tmp_path / "r.nc")],
                 ["sweep", str(spec), "--out", str(tmp_path / "run"), "--torch-device", "cuda"]):
        out = run(*args)
        assert out.exit_code == 1 and out.output == line, out.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]
    bad = run("evaluate", "--torch-device", "gpu")
    assert bad.exit_code == 1 and bad.output == "Error: --torch-device = 'gpu'; expected cpu, cuda or cuda:N\n"


def test_compare_and_sweep_say_why_they_run_on_the_cpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _no_cuda(monkeypatch, available=True)  # a GPU machine: cuda is there, and still not what compare uses
    out = run("compare", "--torch-device", "cuda", "--out", str(tmp_path / "r.nc"))
    assert out.exit_code == 1 and out.output == (
        "Error: --torch-device cuda: compare's device runs are CPU worker processes of one torch thread each, so "
        "that their numbers do not depend on the workers; expected cpu\n")
    out = run("sweep", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "run"), "--torch-device", "cuda")
    assert out.exit_code == 1 and out.output.startswith("Error: --torch-device cuda: each point is an aocsim compare")
    assert list(tmp_path.iterdir()) == []


def test_evaluate_runs_on_the_torch_device_cpu() -> None:
    out = run("evaluate", "digits-deq48", "--torch-device", "cpu")
    assert out.exit_code == 0, out.output
    assert float(next(x for x in out.output.splitlines() if "accuracy" in x).split()[-1]) >= 0.95


def test_the_loop_bench_times_aihwkits_analog_layer_beside_the_noisy_loop() -> None:
    """The noisy rows carry IBM aihwkit-lightning's AnalogLinear iterated the same way (8-bit DAC and ADC, output
    noise); its noise is real: two seeds end apart, and the loop it iterates moves from its start."""
    import torch

    from aocsim.experiments import aihwkit_yardstick
    from aocsim.experiments.bench_loop import bench_loop, format_loop_bench

    assert aihwkit_yardstick.available()  # a test dependency (pyproject.toml)
    x, z0 = torch.rand(4, 48), torch.zeros(4, 48)
    first = aihwkit_yardstick.analog_loop(48, torch.float32, seed=0)
    torch.manual_seed(1)
    a = first(z0, x, 5)
    torch.manual_seed(2)
    b = first(z0, x, 5)
    assert not torch.equal(a, b) and float(a.abs().max()) > 0.1
    rows = bench_loop("aoc48", (4,), iterations=3, repeats=1, compiled=False)
    noisy = [r for r in rows if r.setting == "all noise"]
    assert noisy and all(r.aihwkit_per_s is not None and r.aihwkit_per_s > 0 for r in noisy)
    assert all(r.aihwkit_per_s is None for r in rows if r.setting.startswith("deterministic"))
    table = format_loop_bench(rows)
    assert "folded / aihwkit" in table and "aihwkit draws 1 normal per output" in table
    assert "aihwkit draws" not in format_loop_bench([r for r in rows if r.aihwkit_per_s is None])
