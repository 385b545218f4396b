"""Reliability suite: odd values at every public entry point give a documented error or a correct result.

Each test feeds one entry point (solve, equilibrium, DEQ.predict, load_model,
load_device, the CLI) values drawn by hypothesis: wrong types, shapes and
dtypes, empty and huge batches, NaN and infinities, negative counts. What may
come out is a correct result (checked against what the call promises) or an
`AocsimError` whose message is one line; anything else (a TypeError, a torch
RuntimeError, a traceback in the CLI) fails the test.

Examples per entry point: 50 by default (CI); set AOCSIM_RELIABILITY_EXAMPLES
(e.g. 2000) for a thorough run:

    AOCSIM_RELIABILITY_EXAMPLES=2000 python -m pytest -q -n 0 tests/cli/test_reliability.py
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

import aocsim
from aocsim import DEQ, DEQConfig, Implicit, Phantom, Picard, Unrolled
from aocsim.errors import AocsimError
from aocsim.solve import SolveStatus

EXAMPLES = int(os.environ.get("AOCSIM_RELIABILITY_EXAMPLES", "50"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 50,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])

DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.uint8,
          torch.bool, torch.complex64, torch.complex128]
ODD_SCALARS = st.sampled_from([None, "", "1e-3", "ten", b"x", [], {}, (), object(), float("nan"), float("inf"),
                               -float("inf"), True, False, -1, 0, -0.0, 1e308, -1e-300, np.int64(3), np.float32(0.5),
                               complex(1, 1), torch.tensor(1.0), torch.tensor([1.0, 2.0]), torch.zeros(0)])


def _expect(call: Callable[[], Any]) -> Any:
    """The call's result, or None when it raised one of aocsim's documented one-line errors."""
    try:
        result = call()
    except AocsimError as exc:
        message = str(exc)
        assert message and "\n" not in message, f"not one line: {message!r}"
        event(f"error {type(exc).__name__}")
        return None
    event("result")
    return result


@st.composite
def tensors(draw: st.DrawFn, *, width: int | None = None, max_batch: int = 64) -> torch.Tensor:
    """Tensors of any dtype and shape: empty, scalar, huge batches, NaN and infinities."""
    dtype = draw(st.sampled_from(DTYPES))
    small = st.integers(0, max_batch)
    batch = draw(st.one_of(small, small, small, small, st.sampled_from([2048, 50_000])))  # 1 in 5 huge
    dims = draw(st.integers(0, 3))
    rest = [width if width is not None and draw(st.booleans()) else draw(st.integers(0, 5))
            for _ in range(max(dims - 1, 0))]
    shape = [batch, *rest][:dims]
    if math.prod(shape) > 150_000:
        shape = [shape[0], 1] if dims >= 2 else shape[:1]
    scale = draw(st.sampled_from([0.0, 1e-3, 1.0, 1e3, 1e30]))
    t = torch.randn(shape, generator=torch.Generator().manual_seed(draw(st.integers(0, 2**16))),
                    dtype=torch.float64) * scale
    if t.numel() and draw(st.booleans()):
        special = draw(st.sampled_from([float("nan"), float("inf"), -float("inf")]))
        t.view(-1)[draw(st.integers(0, t.numel() - 1))] = special
    if dtype.is_complex:
        return t.to(dtype)
    if dtype.is_floating_point:
        return t.to(dtype)
    return torch.nan_to_num(t).clamp(-100, 100).to(dtype)


@st.composite
def good_tensors(draw: st.DrawFn, *, width: int) -> torch.Tensor:
    """Valid inputs: float32 / float64, finite, [B, width] with B from 1 to a huge batch."""
    batch = draw(st.one_of(st.integers(1, 64), st.integers(1, 64), st.integers(1, 64), st.sampled_from([2048, 50_000])))
    dtype = draw(st.sampled_from([torch.float64, torch.float32]))
    scale = draw(st.sampled_from([0.0, 1e-3, 1.0, 1e3]))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    return (torch.randn(batch, width, generator=gen, dtype=torch.float64) * scale).to(dtype)


def recast(width: int) -> st.SearchStrategy[torch.Tensor]:
    """Well-shaped tensors in any dtype (complex, bool, integer, half): the dtype alone is odd."""
    return st.tuples(good_tensors(width=width), st.sampled_from(DTYPES)).map(lambda pair: pair[0].to(pair[1]))


def mostly(valid: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Valid values weighted four to one against odd ones: a nudge (hypothesis does not pick branches
    uniformly) so that whole calls are often valid and their results get checked."""
    return st.one_of(valid, valid, valid, valid, odd)


def tolerances() -> st.SearchStrategy[Any]:
    return mostly(st.sampled_from([0.0, 1e-12, 1e-8, 1e-6, 1e-3, 1.0, np.float64(1e-9)]),
                  st.one_of(st.floats(allow_nan=True, allow_infinity=True), ODD_SCALARS,
                            st.builds(lambda n: torch.full((n,), 1e-8), st.integers(0, 4))))


def counts() -> st.SearchStrategy[Any]:
    return mostly(st.one_of(st.integers(0, 300), st.just(np.int64(7))),
                  st.one_of(st.integers(-5, -1), st.sampled_from([2.5, "10", None, True, 1e3])))


def solvers() -> st.SearchStrategy[Any]:
    return mostly(st.sampled_from(["anderson", "picard", Picard(0.5)]),
                  st.sampled_from(["newton", None, 5, "Anderson", object()]))


def solver_options() -> st.SearchStrategy[dict[str, Any]]:
    good = st.fixed_dictionaries({}, optional={"memory": st.integers(1, 8), "mixing": st.sampled_from([0.3, 1.0])})
    odd = st.dictionaries(st.sampled_from(["damping", "memory", "mixing", "regularization", "bogus"]),
                          st.one_of(st.floats(allow_nan=True), st.integers(-3, 8), ODD_SCALARS), max_size=2)
    return mostly(good, odd)


def _check_solution(res: Any, z0: torch.Tensor, atol: Any, rtol: Any) -> None:
    """A SolveResult of z = 0.5 z + 1 must report honestly: converged samples are at z = 2."""
    assert isinstance(res, aocsim.SolveResult)
    assert res.z.shape == z0.shape and res.z.dtype == z0.dtype
    assert set(res.status.unique().tolist()) <= {int(s) for s in SolveStatus}
    assert bool((res.iterations >= 0).all())
    conv = res.converged
    flat = res.z.reshape(res.z.shape[0], -1)
    if bool(conv.any()):
        err = (0.5 * flat[conv] + 1 - flat[conv]).norm(dim=1)
        bound = torch.as_tensor(atol, dtype=torch.float64).expand(conv.shape)[conv] + \
            torch.as_tensor(rtol, dtype=torch.float64).expand(conv.shape)[conv] * (0.5 * flat[conv] + 1).norm(dim=1)
        slack = 1e-2 if z0.dtype == torch.float32 else 1e-9
        assert bool((err.double() <= bound * (1 + slack) + slack * 10).all()), "converged samples miss the tolerance"
    assert bool(torch.isfinite(res.z).all()), "a returned state is not finite"


@SETTINGS
@given(z0=mostly(good_tensors(width=3), st.one_of(recast(3), tensors(width=3), ODD_SCALARS)), atol=tolerances(), rtol=tolerances(), max_iter=counts(),
       solver=solvers(), options=solver_options(), ret_best=st.booleans(), trace=st.booleans())
def test_solve(z0: Any, atol: Any, rtol: Any, max_iter: Any, solver: Any, options: dict, ret_best: bool,
               trace: bool) -> None:
    if solver is not None and not isinstance(solver, str) or solver == "picard":
        options = {}  # Anderson's options; a solver object takes none
    res = _expect(lambda: aocsim.solve(lambda z: 0.5 * z + 1, z0, atol=atol, rtol=rtol, max_iter=max_iter,
                                       solver=solver, return_best=ret_best, trace=trace, **options))
    if res is not None:  # accepted: then the arguments were ones solve documents
        assert z0.dtype in (torch.float32, torch.float64) and z0.numel() > 0 and bool(torch.isfinite(z0).all())
        assert isinstance(max_iter, (int, np.integer)) and not isinstance(max_iter, bool) and max_iter >= 0
        _check_solution(res, z0, atol, rtol)
        if trace:
            assert res.trace is not None and res.trace.shape[0] == z0.shape[0]


@SETTINGS
@given(z0=good_tensors(width=3), atol=st.sampled_from([0.0, 1e-12, 1e-8, 1e-5, 1.0]),
       rtol=st.sampled_from([0.0, 1e-10, 1e-4]), max_iter=st.integers(0, 200),
       solver=st.sampled_from(["anderson", "picard"]), ret_best=st.booleans())
def test_solve_valid_inputs_give_honest_results(z0: torch.Tensor, atol: float, rtol: float, max_iter: int,
                                                solver: str, ret_best: bool) -> None:
    """Only valid arguments: a result always, and what it claims holds."""
    res = aocsim.solve(lambda z: 0.5 * z + 1, z0, atol=atol, rtol=rtol, max_iter=max_iter, solver=solver,
                       return_best=ret_best)
    event("result")
    _check_solution(res, z0, atol, rtol)
    reachable = atol >= (1e-5 if z0.dtype == torch.float32 else 1e-12) * max(1.0, float(z0.abs().max()))
    if max_iter >= 100 and reachable:  # a contraction by 1/2 gets there within 100 steps
        assert res.all_converged, res.summary()


@pytest.mark.slow
@SETTINGS
@given(x=good_tensors(width=4), max_iter=st.integers(1, 200))
def test_deq_predict_valid_inputs_match_the_logits(x: torch.Tensor, max_iter: int) -> None:
    y = _DEQ.predict(x, max_iter=max_iter)
    event("result")
    assert y.shape == (x.shape[0],) and y.dtype == torch.int64
    with torch.no_grad():
        assert torch.equal(y, _DEQ(x, max_iter=max_iter).logits.argmax(1))


@SETTINGS
@given(z0=mostly(good_tensors(width=3), st.one_of(tensors(width=3, max_batch=16), ODD_SCALARS)),
       backward=mostly(st.sampled_from([Implicit(), Phantom(2, 0.5), Unrolled(3)]),
                       st.sampled_from([None, "implicit", Implicit])),
       max_iter=counts(), grad=st.booleans())
def test_equilibrium(z0: Any, backward: Any, max_iter: Any, grad: bool) -> None:
    b = torch.ones((), dtype=z0.dtype if isinstance(z0, torch.Tensor) and z0.is_floating_point() else
                   torch.float64, requires_grad=True)

    def run() -> Any:
        with torch.set_grad_enabled(grad):
            return aocsim.equilibrium(lambda z: 0.5 * z + b, z0, backward=backward, max_iter=max_iter)

    out = _expect(run)
    if out is not None:
        z, res = out
        _check_solution(res, z0, 1e-10, 1e-8)
        assert z.shape == z0.shape
        if grad and bool(res.all_converged) and isinstance(backward, Implicit):
            z.sum().backward()  # dz*/db = 1 / (1 - 0.5) = 2 per entry
            assert b.grad is not None and float(b.grad) == pytest.approx(2.0 * z0.numel(), rel=1e-3)


_DEQ = DEQ(DEQConfig(6, 4, 3, alpha=0.3), generator=torch.Generator().manual_seed(0))


@SETTINGS
@given(x=mostly(good_tensors(width=4), st.one_of(recast(4), tensors(width=4), ODD_SCALARS,
                                                 st.lists(st.floats(), max_size=4))),
       options=st.fixed_dictionaries({}, optional={"max_iter": counts(), "atol": tolerances(), "solver": solvers()}))
def test_deq_predict(x: Any, options: dict) -> None:
    y = _expect(lambda: _DEQ.predict(x, **options))
    if y is not None:  # accepted: then x was a finite real [B >= 1, 4] tensor (never complex or bool)
        assert isinstance(x, torch.Tensor) and not x.is_complex() and x.dtype != torch.bool
        assert x.ndim == 2 and x.shape[0] >= 1 and bool(torch.isfinite(x).all())
        assert isinstance(y, torch.Tensor) and y.dtype == torch.int64 and y.shape == (x.shape[0],)
        assert bool(((y >= 0) & (y < 3)).all())
        with torch.no_grad():
            logits = _DEQ(x, **options).logits
        assert torch.equal(y, logits.argmax(1))


NAMES = st.one_of(st.sampled_from(["digits-deq48", "parity-explicit1", "", ".", "/", "..", "/etc/passwd",
                                   "models/digits-deq48", "digits-deq48/card.yaml", "x" * 300, "a\x00b",
                                   "DIGITS-DEQ48", "../models/digits-deq48"]),
                  st.text(max_size=40), ODD_SCALARS, st.builds(Path, st.text(max_size=20)))


@SETTINGS
@given(name=mostly(st.sampled_from(["digits-deq48", "parity-explicit1", "a5-implicit"]), NAMES))
@example("digits-deq48")
@example("a5-implicit")
@example(Path(__file__).resolve().parents[2] / "models" / "seeds" / "parity-implicit-s1")
def test_load_model_by_name(name: Any) -> None:
    _check_loaded(_expect(lambda: aocsim.load_model(name)))


@SETTINGS
@given(device=st.one_of(st.sampled_from(["cpu", torch.device("cpu"), "cuda", "cuda:7", "gpu", "meta", "", None, 0, -1,
                                         "CPU", "cpu:0"]), st.text(max_size=8)))
@example("cpu")
@example(torch.device("cpu"))
def test_load_model_on_a_device(device: Any) -> None:
    _check_loaded(_expect(lambda: aocsim.load_model("digits-deq48", device=device)))


def _check_loaded(model: Any) -> None:
    if model is not None:
        assert isinstance(model, torch.nn.Module) and isinstance(model.card, dict) and not model.training
        assert all(bool(torch.isfinite(p).all()) for p in model.parameters())


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from aocsim.io.model_files import save_model

    model = DEQ(DEQConfig(5, 4, 3), generator=torch.Generator().manual_seed(1))
    card = {"name": "tiny", "kind": "deq", "task": "digits", "config": model.config.to_dict()}
    return save_model(model, tmp_path_factory.mktemp("tiny") / "tiny", card)


CARD_FIELDS = ["name", "kind", "task", "config", "config.state_size", "config.input_size", "config.alpha",
               "config.structure", "config.blocks", "weights", "weights.file", "weights.sha256", "weights.tensors",
               "weights.tensors.weight", "weights.dtype"]


@SETTINGS
@given(field=st.sampled_from(CARD_FIELDS),
       value=st.one_of(st.sampled_from([None, "", "x", [], {}, True, False, -1, 0, 0.5, 1e308, float("nan"),
                                        float("inf"), {"a": 1}, [[1, 2]]]),
                       st.text(max_size=10), st.integers(-3, 10), st.lists(st.integers(-1, 6), max_size=3),
                       st.sampled_from(["/etc/passwd", "../weights.h5", "weights.h5", "deq", "feedback", "0" * 64])))
def test_load_model_with_a_damaged_card(tiny_model_dir: Path, field: str, value: Any) -> None:
    import yaml

    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "m"
        shutil.copytree(tiny_model_dir, target)
        card = yaml.safe_load((target / "card.yaml").read_text())
        *parents, leaf = field.split(".")
        node = card
        for key in parents:
            node = node[key]
        node[leaf] = value
        (target / "card.yaml").write_text(yaml.safe_dump(card))
        model = _expect(lambda: aocsim.load_model(target))
        if model is not None:  # the damage was harmless (e.g. the same value): the model must work
            x = torch.rand(2, model.config.input_size, dtype=torch.float64)
            assert model.predict(x).shape == (2,)


@SETTINGS
@given(name=st.one_of(st.sampled_from(["ideal", "aoc48", "aoc16-twin", "AOC48", "aoc48.yaml", "devices/aoc48.yaml",
                                       "/etc/passwd", "x.yaml", "", "x" * 300, "a\x00b"]),
                      st.text(max_size=30), ODD_SCALARS))
def test_load_device(name: Any) -> None:
    dev = _expect(lambda: aocsim.load_device(name))
    if dev is not None:
        assert isinstance(dev, aocsim.DeviceProfile) and dev.name


@pytest.fixture(scope="module")
def fast_long_work() -> Any:
    """Replace the long work behind the CLI by quick stand-ins; argument handling stays real."""
    import aocsim.experiments.evaluate as evaluate
    from aocsim.io.model_files import resolve_model_dir
    from aocsim.train import recipes

    patch = pytest.MonkeyPatch()
    fake_metrics = {"task": "digits", "split": "test", "n": 1, "dtype": "torch.float64", "atol": 1e-9,
                    "accuracy": 1.0, "converged_fraction": 1.0, "iterations_mean": 1.0, "iterations_max": 1,
                    "residual_max": 0.0, "accuracy_without_feedback": 1.0, "feedback_max": 0.1}
    patch.setattr(evaluate, "evaluate_model", lambda *a, **k: fake_metrics)

    def fake_state_tracking(model: Any, *, task: Any = None, batch: int = 256, **kwargs: Any) -> dict:
        recipe = evaluate.state_tracking_recipe(model, task)  # the real --task check
        entry = {"length": 16, "simultaneous": {"accuracy": 1.0, "iterations_per_token": 1.0,
                                                "converged_fraction": 1.0, "accuracy_by_position": [1.0] * 16}}
        entry["sequential"], entry["mode_agreement"] = entry["simultaneous"], 1.0
        return {"task": "state_tracking", "group": recipe.task, "implicit": recipe.implicit,
                "train_length": 16, "identity_prob": 0.5, "lengths": {"1L": entry}}

    patch.setattr(evaluate, "evaluate_state_tracking", fake_state_tracking)
    patch.setattr(recipes, "RECIPES", {name: (lambda out, **k: resolve_model_dir("digits-deq48"))
                                       for name in recipes.RECIPES})
    patch.setattr("aocsim.experiments.bench_loop.bench_loop", lambda profile, *a, **k: aocsim.load_device(profile) and [])
    yield
    patch.undo()


MODELS = mostly(st.sampled_from(["digits-deq48", "parity-implicit", "a5-explicit1"]),
                st.one_of(st.sampled_from(["nope", "", "/etc", "models/seeds/a5-implicit-s1", "x" * 300]),
                          st.text(max_size=12)))
ODD_TEXT = st.one_of(st.sampled_from(["", "-1", "0", "nan", "1e9", "99999999999", "A5", "Z2", "S3", "parity",
                                      "cuda", "gpu", "p.png", "p.txt", "/proc/x.png", "/etc/passwd/x", "x/y/z.svg"]),
                     st.text(max_size=12), st.integers(-5, 300).map(str))


def option(name: str, value: st.SearchStrategy[str] | None = None) -> st.SearchStrategy[list[str]]:
    """[] or [name] or [name, value]: an option given or not, with a mostly sensible value."""
    given = st.just([name]) if value is None else st.tuples(st.just(name), value).map(list)
    return st.one_of(st.just([]), given)


def joined(*parts: st.SearchStrategy[list[str]]) -> st.SearchStrategy[list[str]]:
    return st.tuples(*parts).map(lambda lists: [arg for part in lists for arg in part])


EVALUATE = joined(st.just(["evaluate"]), MODELS.map(lambda m: [m]), option("--float32"),
                  option("--task", mostly(st.sampled_from(["Z2", "A5", "parity"]), ODD_TEXT)),
                  option("--batch", mostly(st.integers(1, 8).map(str), ODD_TEXT)),
                  option("--plot", mostly(st.sampled_from(["p.png", "out/p.svg", "p.pdf"]), ODD_TEXT)),
                  option("--torch-device", mostly(st.just("cpu"), ODD_TEXT)), option("--device", ODD_TEXT),
                  option("--overwrite"), option("--uniform"),
                  option("--factors", mostly(st.sampled_from(["1,4", "1,4,16", "2"]), ODD_TEXT)),
                  option("--compare", MODELS))
TRAIN = joined(st.just(["train"]),
               mostly(st.sampled_from(["digits-deq48", "parity-implicit", "a5-explicit2"]), ODD_TEXT).map(lambda r: [r]),
               option("--out", mostly(st.sampled_from(["m", "out/m", "models/x"]), ODD_TEXT)),
               option("--seed", mostly(st.integers(0, 9).map(str), ODD_TEXT)),
               option("--epochs", mostly(st.integers(1, 3).map(str), ODD_TEXT)),
               option("--steps", mostly(st.integers(1, 3).map(str), ODD_TEXT)), option("--force"))
OTHERS = st.one_of(st.sampled_from([["models", "list"], ["models", "table"], ["devices", "list"],
                                    ["models", "table", "--markdown"], ["devices", "show", "aoc48"]]),
                   st.tuples(st.sampled_from([["devices", "show"], ["models", "table"], ["bench", "loop", "--device"]]),
                             ODD_TEXT).map(lambda pair: [*pair[0], pair[1]]))


@SETTINGS
@given(threads=option("--threads", mostly(st.sampled_from(["1", "2"]), ODD_TEXT)),
       command=st.one_of(EVALUATE, TRAIN, OTHERS), extra=mostly(st.just([]), st.lists(ODD_TEXT, max_size=2)))
def test_cli(fast_long_work: None, threads: list[str], command: list[str], extra: list[str]) -> None:
    runner, cwd = CliRunner(), os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:  # relative --out / --plot paths land here
        os.chdir(tmp)
        try:
            out = runner.invoke(main_cli(), [*threads, *command, *extra])
        finally:
            os.chdir(cwd)
    event(f"exit {out.exit_code}")
    if out.exit_code == 0:
        return
    # click's own usage errors exit 2; aocsim's errors exit 1 with one "Error: ..." line; nothing else.
    assert isinstance(out.exception, SystemExit), f"{type(out.exception).__name__}: {out.exception}"
    assert "Traceback" not in out.output
    if out.exit_code == 1:
        errors = [line for line in out.output.splitlines() if line.startswith("Error: ")]
        assert len(errors) == 1, out.output
    else:
        assert out.exit_code == 2, out.output


def main_cli() -> Any:
    from aocsim.cli import main

    return main
