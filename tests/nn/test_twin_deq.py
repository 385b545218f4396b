"""The twin DEQ (aocsim.nn.twin_deq): a model whose map is the calibrated pipeline, run by the engine.

Gradients through the pipeline against finite differences; the map against the engine's step and the
per-stage yardstick; reproducible training; the loop cut (beta = 0) leaving the readout blind; one-line
errors for bad profiles and configs; the bundled models' card figures.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from aocsim.errors import InputError, UnknownNameError
from aocsim.hardware.engine.loop import OpticalLoop
from aocsim.experiments.reference_loop import PerStageLoop
from aocsim.hardware.profiles.profile import load_device
from aocsim.io.model_files import bundled_models, load_model, save_model
from aocsim.nn.twin_deq import EXACT_SOLVE, TwinDEQ, TwinDEQConfig
from aocsim.solve.backward import Implicit

TIGHT = {**EXACT_SOLVE, "atol": 0.0, "rtol": 1e-14, "max_iter": 3000}
ADJOINT = Implicit(solver="picard", atol=0.0, rtol=1e-14, max_iter=3000)


def tiny(gen: torch.Generator, **kw) -> TwinDEQ:
    """16 channels (aoc16-twin), input into [0, 8), readout from [8, 16); unquantised unless asked."""
    config = TwinDEQConfig(16, 3, 2, **{"split": 8, "profile": "aoc16-twin", "slm_bits": None, **kw})
    return TwinDEQ(config, beta=10.0, generator=gen)


def _loss(model: TwinDEQ, x: torch.Tensor, probe: torch.Tensor) -> torch.Tensor:
    return (model(x, backward=ADJOINT, **TIGHT).logits * probe).sum()


@pytest.mark.parametrize("name", ["weight", "beta", "alpha", "inject_weight", "inject_bias", "readout_weight"])
def test_gradient_matches_finite_differences(name: str, gen: torch.Generator) -> None:
    """The implicit gradient through the engine's pipeline (W on the SLM, beta and alpha in the node, U
    through the clip) equals a central difference along a random direction, in float64."""
    model = tiny(gen, train_alpha=True)
    x = torch.rand(3, 3, generator=gen, dtype=torch.float64)
    probe = torch.randn(3, 2, generator=gen, dtype=torch.float64)
    param = dict(model.named_parameters())[name]
    direction = torch.randn(param.shape, generator=gen, dtype=torch.float64)
    if name == "inject_weight":
        direction = direction * model.inject_mask
    (grad,) = torch.autograd.grad(_loss(model, x, probe), param)
    eps = 1e-6
    with torch.no_grad():
        values = []
        for sign in (1.0, -1.0):
            param.add_(sign * eps * direction)
            values.append(float(_loss(model, x, probe)))
            param.sub_(sign * eps * direction)
    numeric = (values[0] - values[1]) / (2 * eps)
    analytic = float((grad * direction).sum())
    assert abs(analytic) > 1e-6, f"{name}: no gradient reaches it"
    assert analytic == pytest.approx(numeric, rel=1e-5, abs=1e-9)


def test_quantised_weights_pass_the_gradient_straight_through(gen: torch.Generator) -> None:
    """On a 9-bit SLM the forward sees the quantised W / m, the gradient is that of the unquantised map."""
    exact, quantised = tiny(gen), tiny(torch.Generator().manual_seed(1234), slm_bits=9)
    quantised.load_state_dict(exact.state_dict())
    x = torch.rand(3, 3, generator=gen, dtype=torch.float64)
    out_q, out_e = quantised(x, **TIGHT), exact(x, **TIGHT)
    assert not torch.equal(out_q.z, out_e.z)
    torch.testing.assert_close(out_q.z, out_e.z, atol=2e-3, rtol=0)  # one level is 1/255 of max |W|
    grads = [torch.autograd.grad(m(x, backward=ADJOINT, **TIGHT).logits.sum(), m.weight)[0] for m in (quantised, exact)]
    torch.testing.assert_close(grads[0], grads[1], rtol=0.05, atol=1e-3)


def test_map_is_the_engine_step_and_the_per_stage_pipeline(gen: torch.Generator) -> None:
    """TwinDEQ.step is OpticalLoop.step of a plainly loaded noise-free aoc48-twin with the same W, alpha and
    beta on 9 bits, bit for bit; its fixed point is a fixed point of the per-stage (twin-style) pipeline."""
    model = TwinDEQ(TwinDEQConfig(48, 5, 3, split=24), generator=gen)
    x = torch.rand(4, 5, generator=gen, dtype=torch.float64)
    z = 0.3 * torch.randn(4, 48, generator=gen, dtype=torch.float64)
    u = model.injection(x)
    loop = OpticalLoop(load_device("aoc48-twin", overrides={"slm.bits": 9}), model.weight.detach(), alpha=0.5,
                       beta=float(model.beta.detach()))
    with torch.no_grad():
        assert torch.equal(model.step(z, u), loop.step(z, u))
        z_star = model(x).z
        torch.testing.assert_close(PerStageLoop(loop).step(z_star, u), z_star, atol=1e-9, rtol=0)


def test_cutting_the_loop_leaves_the_readout_blind(gen: torch.Generator) -> None:
    """With beta = 0 the optical path is off: every input gives the same outputs (the readout channels
    see only their bias); with the loop on, they differ."""
    model = tiny(gen)
    x = torch.rand(5, 3, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        cut = model(x, loop=model.loop(beta=0.0)).logits
        on = model(x).logits
    torch.testing.assert_close(cut, cut[:1].expand_as(cut), atol=1e-12, rtol=0)
    assert float((on - on[:1]).abs().max()) > 1e-3


def test_training_is_reproducible(tmp_path: Path) -> None:
    """The same recipe and seed give the same weights, bit for bit; the model round-trips through its files."""
    from aocsim.train.twin import TwinRecipe, train_twin

    recipe = TwinRecipe(name="tiny", task="regression", n_train=24, n_test=16, profile="aoc16-twin", state_size=16,
                        split=8, epochs=2, batch_size=8, seed=3)
    (a, card), (b, _) = train_twin(recipe, progress=False), train_twin(recipe, progress=False)
    for key, value in a.state_dict().items():
        assert torch.equal(value, b.state_dict()[key]), key
    loaded = load_model(save_model(a, tmp_path / "tiny", card))
    x = torch.linspace(-1, 1, 7, dtype=torch.float64)[:, None]
    with torch.no_grad():
        assert torch.equal(loaded(x).logits, a(x).logits)
    assert card["metrics"]["test"]["mse"] >= 0 and card["kind"] == "twin_deq"


@pytest.mark.parametrize("kwargs, match", [
    ({"profile": "aoc16-twin"}, r"'aoc16-twin' has 16 channels; expected a calibrated profile with state_size = 48"),
    ({"profile": "ideal"}, r"'ideal' has no calibration .* expected a calibrated profile with 48 channels"),
    ({"split": 48}, r"split = 48; expected an integer in \[0, 47\]"),
    ({"slm_bits": 1}, r"slm_bits = 1; expected an integer in \[2, 24\] or None"),
    ({"alpha": 1.0}, r"alpha"),
    ({"train_alpha": "yes"}, r"train_alpha = 'yes'; expected True or False"),
    ({"profile": ""}, r"profile = ''; expected a calibrated device profile name with 48 channels"),
])
def test_bad_configs_fail_with_one_line(kwargs: dict, match: str) -> None:
    with pytest.raises(InputError, match=match) as info:
        TwinDEQConfig(48, 64, 10, **kwargs)
    assert "\n" not in str(info.value)


def test_unknown_profile_lists_the_known_ones() -> None:
    with pytest.raises(UnknownNameError, match="unknown device profile 'aoc99'; known: .*aoc48-twin"):
        TwinDEQConfig(48, 64, 10, profile="aoc99")


def test_bad_inputs_and_recipes_fail_with_one_line(gen: torch.Generator) -> None:
    from aocsim.train.twin import TwinRecipe

    with pytest.raises(InputError, match=r"x has shape \(2, 4\); expected \[B, 3\]"):
        tiny(gen)(torch.zeros(2, 4))
    with pytest.raises(InputError, match="weight has shape .* profile 'aoc48' has 48 channels"):
        tiny(gen).loop("aoc48")
    with pytest.raises(InputError, match="task = 'mnist'"):
        TwinRecipe(task="mnist")


@pytest.mark.skipif("digits-twin48" not in bundled_models(), reason="bundled model not built")
def test_bundled_digits_model_meets_its_card() -> None:
    """The exact path reproduces the card's accuracy (>= 97 %) and the loop carries every answer (W = 0 or
    beta = 0: at most 20 %)."""
    from aocsim.experiments.evaluate import evaluate_model

    model = load_model("digits-twin48")
    m = evaluate_model(model)
    assert m["accuracy"] == pytest.approx(model.card["metrics"]["test"]["accuracy"], abs=1e-12)
    assert m["accuracy"] >= 0.97 and m["converged_fraction"] == 1.0
    assert m["accuracy_without_feedback"] <= 0.2 and m["accuracy_zero_weight"] <= 0.2


@pytest.mark.skipif("regression-twin16" not in bundled_models(), reason="bundled model not built")
def test_bundled_regression_model_meets_its_card() -> None:
    from aocsim.experiments.evaluate import evaluate_model

    model = load_model("regression-twin16")
    m = evaluate_model(model)
    assert m["mse"] == pytest.approx(model.card["metrics"]["test"]["mse"], rel=1e-9)
    assert m["mse"] < m["mse_without_feedback"]


@pytest.mark.skipif("digits-twin48" not in bundled_models(), reason="bundled model not built")
def test_evaluate_command_reports_the_exact_path_and_the_cut_loop() -> None:
    """`aocsim evaluate digits-twin48`: accuracy on the nominal pipeline, and with the loop cut."""
    from click.testing import CliRunner

    from aocsim.cli import main

    out = CliRunner().invoke(main, ["evaluate", "digits-twin48"])
    assert out.exit_code == 0, out.output
    lines = {line.split()[0]: line.split() for line in out.output.splitlines() if line.startswith("  ")}
    assert "nominal aoc48-twin pipeline, 9-bit SLM" in out.output
    assert float(lines["accuracy"][1]) >= 0.97
    assert float(lines["without"][2]) <= 0.2 and "see no input" in out.output
