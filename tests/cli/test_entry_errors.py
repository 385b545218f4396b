"""Issue 12's list of odd calls: each gives one line naming the argument, the value and the expectation."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
from click.testing import CliRunner

import aocsim
from aocsim.cli import main
from aocsim.errors import AocsimError, InputError

F64 = torch.float64


def _solve(z0: Any, **kwargs: Any) -> Any:
    return aocsim.solve(lambda z: 0.5 * z + 1, z0, **kwargs)


def _predict(x: Any) -> Any:
    return aocsim.load_model("digits-deq48").predict(x)


CASES: list[tuple[str, Callable[[], Any], str]] = [
    ("solve, empty batch", lambda: _solve(torch.zeros(0, 3, dtype=F64)),
     "z0 has shape (0, 3); expected [B, ...] with at least one sample and one entry per sample"),
    ("solve, float16", lambda: _solve(torch.zeros(2, 3, dtype=torch.float16)),
     "z0 has dtype float16; expected float32 or float64 (convert with .double() or .float())"),
    ("solve, complex", lambda: _solve(torch.zeros(2, 3, dtype=torch.complex128)),
     "z0 has dtype complex128; expected float32 or float64 (convert with .double() or .float())"),
    ("solve, bool", lambda: _solve(torch.zeros(2, 3, dtype=torch.bool)),
     "z0 has dtype bool; expected float32 or float64 (convert with .double() or .float())"),
    ("solve, not a tensor", lambda: _solve([[0.0, 1.0]]),
     "z0 = [[0.0, 1.0]]; expected a float32 or float64 tensor [B, ...]"),
    ("solve, atol a string", lambda: _solve(torch.zeros(2, 3), atol="1e-3"),
     "atol = '1e-3'; expected a finite number >= 0 or a real tensor of shape [2]"),
    ("solve, rtol None", lambda: _solve(torch.zeros(2, 3), rtol=None),
     "rtol = None; expected a finite number >= 0 or a real tensor of shape [2]"),
    ("solve, max_iter 2.5", lambda: _solve(torch.zeros(2, 3), max_iter=2.5), "max_iter = 2.5; expected an integer >= 0"),
    ("solve, max_iter '10'", lambda: _solve(torch.zeros(2, 3), max_iter="10"),
     "max_iter = '10'; expected an integer >= 0"),
    ("solve, max_iter True", lambda: _solve(torch.zeros(2, 3), max_iter=True),
     "max_iter = True; expected an integer >= 0"),
    ("solve, solver None", lambda: _solve(torch.zeros(2, 3), solver=None),
     "solver = None; expected one of ['anderson', 'picard'] or a solver object (Picard(...), Anderson(...))"),
    ("solve, damping a string", lambda: _solve(torch.zeros(2, 3), solver="picard", damping="0.5"),
     "picard.damping = '0.5'; expected a finite number in (0, 1]"),
    ("solve, map changes dtype", lambda: aocsim.solve(lambda z: z.float(), torch.zeros(2, 3, dtype=F64)),
     "fixed-point map returned dtype float32; expected the dtype of z0 (float64)"),
    ("equilibrium, z0 None", lambda: aocsim.equilibrium(lambda z: z, None),
     "z0 = None; expected a float32 or float64 tensor [B, ...]"),
    ("predict, complex", lambda: _predict(torch.zeros(2, 64, dtype=torch.complex128)),
     "x has dtype complex128; expected real numbers (a floating-point or integer tensor)"),
    ("predict, bool", lambda: _predict(torch.zeros(2, 64, dtype=torch.bool)),
     "x has dtype bool; expected real numbers (a floating-point or integer tensor)"),
    ("predict, empty batch", lambda: _predict(torch.zeros(0, 64, dtype=F64)),
     "x has shape (0, 64); expected at least one sample [B >= 1, 64]"),
    ("predict, wrong width", lambda: _predict(torch.zeros(2, 10, dtype=F64)),
     "x has shape (2, 10); expected [B, 64] (input_size = 64)"),
    ("load_device(None)", lambda: aocsim.load_device(None),
     "name_or_path = None; expected a device profile name (aoc-projected, aoc16, aoc16-twin, aoc48, aoc48-twin, ideal) "
     "or a path to a .yaml file"),
    ("load_device(48)", lambda: aocsim.load_device(48),
     "name_or_path = 48; expected a device profile name (aoc-projected, aoc16, aoc16-twin, aoc48, aoc48-twin, ideal) "
     "or a path to a .yaml file"),
    ("load_model(None)", lambda: aocsim.load_model(None), "name_or_path = None; expected a bundled model name ("),
    ("load_model, unknown device", lambda: aocsim.load_model("digits-deq48", device="gpu"),
     "device = 'gpu'; expected 'cpu', 'cuda' or 'cuda:N'"),
]


@pytest.mark.parametrize(("case", "call", "message"), CASES, ids=[c[0] for c in CASES])
def test_odd_calls_give_one_documented_line(case: str, call: Callable[[], Any], message: str) -> None:
    with pytest.raises(InputError) as info:
        call()
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(message) if message.endswith("(") else text == message


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_where_torch_has_none_is_one_line() -> None:
    with pytest.raises(InputError, match=r"^device = 'cuda'; this torch \(.*\) sees no CUDA device; expected 'cpu'$"):
        aocsim.load_model("digits-deq48", device="cuda")
    out = CliRunner().invoke(main, ["evaluate", "digits-deq48", "--torch-device", "cuda"])
    assert out.exit_code == 1
    assert out.output == "Error: --torch-device cuda: no CUDA device is available to torch here; expected cpu\n"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_load_model_on_cuda_predicts_like_cpu() -> None:  # pragma: no cover - GPU only
    x = torch.rand(16, 64, dtype=F64, generator=torch.Generator().manual_seed(0))
    cpu = aocsim.load_model("digits-deq48").predict(x)
    gpu = aocsim.load_model("digits-deq48", device="cuda").predict(x)
    assert gpu.device.type == "cuda" and torch.equal(cpu, gpu.cpu())


def test_float32_evaluation_uses_a_reachable_tolerance() -> None:
    # atol 1e-9 is below float32's residual floor; it used to make Anderson's linear solve singular.
    out = CliRunner().invoke(main, ["evaluate", "digits-deq48", "--float32"])
    assert out.exit_code == 0, out.output
    assert "torch.float32" in out.output and "atol 1e-05" in out.output
    converged = next(line for line in out.output.splitlines() if "converged" in line)
    assert float(converged.split()[1]) == 1.0


def test_anderson_survives_a_singular_least_squares_system() -> None:
    from aocsim.experiments.evaluate import evaluate_model

    m = evaluate_model(aocsim.load_model("digits-deq48"), dtype=torch.float32, atol=1e-9)
    assert m["accuracy"] > 0.95 and m["residual_max"] < 1e-5
    assert m["converged_fraction"] > 0.99  # samples with a singular system fall back to a plain step


@pytest.mark.parametrize(("args", "message"), [
    (["digits-deq48", "--task", "A5"],
     "Error: --task applies to state-tracking models; digits-deq48 is a deq model on task 'digits'"),
    (["digits-deq48", "--batch", "8", "--plot", "x.png"],
     "Error: --batch, --plot apply to state-tracking models; digits-deq48 is a deq model on task 'digits'"),
    (["parity-implicit", "--float32"],
     "Error: --float32 applies to DEQ models; parity-implicit is a state-tracking model (evaluated on the CPU in "
     "the dtype of its weights)"),
    (["charlm-implicit", "--batch", "8"],
     "Error: --batch applies to state-tracking models; charlm-implicit is a language model, evaluated on the CPU "
     "on its card's held-out split"),

])
def test_evaluate_refuses_options_that_do_not_apply(args: list[str], message: str) -> None:
    out = CliRunner().invoke(main, ["evaluate", *args])
    assert out.exit_code == 1 and out.output.strip() == message


def test_the_evaluation_plan_checks_options_in_the_library() -> None:
    """The task dispatch and what applies to it live in aocsim.experiments.evaluate (the CLI only names the
    flags): a loaded model, an option for another task, a comparison model of another task."""
    from aocsim.experiments.evaluate import STATE_TRACKING, plan_evaluation

    parity = aocsim.load_model("parity-implicit")
    with pytest.raises(AocsimError, match=r"^torch_device applies to DEQ models; parity-implicit is a state-tracking"):
        plan_evaluation(parity, torch_device="cuda:0")
    with pytest.raises(AocsimError, match=r"^compare 'digits-deq48': digits-deq48 is a deq model on task 'digits'"):
        plan_evaluation(parity, compare=("digits-deq48",))
    plan = plan_evaluation(parity, compare=("parity-explicit1",), torch_device="cpu", float32=False)
    assert plan.task == STATE_TRACKING and [m.card["name"] for m in plan.models] == ["parity-implicit",
                                                                                     "parity-explicit1"]


def test_explicit_models_print_one_row_per_length(tmp_path: Any) -> None:
    out = CliRunner().invoke(main, ["evaluate", "parity-explicit1", "--batch", "8", "--plot",
                                    str(tmp_path / "p.png")])
    assert out.exit_code == 0, out.output
    assert "simultaneous" not in out.output and "sequential" not in out.output and "agreement" not in out.output
    rows = [line.split() for line in out.output.splitlines() if line.strip().startswith(("1L", "4L", "8L"))]
    assert [r[0] for r in rows] == ["1L", "4L", "8L"] and all(0.0 <= float(r[-1]) <= 1.0 for r in rows)


def test_cli_prints_aocsim_errors_as_one_line_without_traceback() -> None:
    out = CliRunner().invoke(main, ["evaluate", "nope"])
    assert out.exit_code == 1 and len(out.output.strip().splitlines()) == 1
    assert isinstance(out.exception, SystemExit) and not isinstance(out.exception, AocsimError)


@pytest.mark.parametrize(("args", "hint"), [
    (["train", "digits-deq48", "--seed", "-1"], "--seed"),
    (["evaluate", "parity-implicit", "--batch", "99999999999"], "--batch"),
    (["--threads", "0", "evaluate"], "--threads"),
])
def test_out_of_range_counts_are_usage_errors(args: list[str], hint: str) -> None:
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 2 and f"Invalid value for '{hint}'" in out.output and "Traceback" not in out.output


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_state_tracking_evaluation_stays_on_the_cpu() -> None:  # pragma: no cover - GPU only
    out = CliRunner().invoke(main, ["evaluate", "parity-implicit", "--torch-device", "cuda"])
    assert out.exit_code == 1
    assert out.output.strip() == ("Error: --torch-device = 'cuda' applies to DEQ models; state-tracking models "
                                  "evaluate on the CPU")
