"""The DEQ cell: structure, limits, dtype/device handling, bad input."""

from __future__ import annotations

import pytest
import torch

from aocsim import DEQ, DEQConfig
from aocsim.errors import InputError

TIGHT = {"atol": 1e-13, "rtol": 0.0, "max_iter": 500}


def test_fixed_point_satisfies_the_equation(gen: torch.Generator) -> None:
    model = DEQ(DEQConfig(16, 5, 3, alpha=0.3), beta=0.5, generator=gen)
    x = torch.randn(7, 5, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        out = model(x, **TIGHT)
        w, u = model.operator(), model.injection(x)
        rhs = 0.3 * out.z + torch.tanh(out.z) @ w.T + u
    assert out.solve.all_converged
    torch.testing.assert_close(out.z, rhs, atol=1e-12, rtol=0)


def test_feedforward_structure_equals_the_layered_network(gen: torch.Generator) -> None:
    # alpha = 0 and W only on the sub-diagonal blocks: the fixed point is the explicit
    # forward pass z1 = u1, z2 = beta W21 tanh(z1) + u2, z3 = beta W32 tanh(z2) + u3.
    blocks = (4, 3, 2)
    model = DEQ(DEQConfig(9, 5, 2, alpha=0.0, structure="feedforward", blocks=blocks), beta=2.0, generator=gen)
    x = torch.randn(6, 5, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        w = model.operator()
        assert torch.count_nonzero(w) == 4 * 3 + 3 * 2
        u = model.injection(x)
        z1 = u[:, :4]
        z2 = torch.tanh(z1) @ w[4:7, :4].T + u[:, 4:7]
        z3 = torch.tanh(z2) @ w[7:, 4:7].T + u[:, 7:]
        out = model(x, **TIGHT)
        picard = model(x, solver="picard", atol=0.0, rtol=0.0, max_iter=10)
    torch.testing.assert_close(out.z, torch.cat([z1, z2, z3], dim=1), atol=1e-12, rtol=0)
    # The operator is nilpotent: plain iteration is exact after one step per layer.
    assert (picard.solve.iterations == 3).all() and picard.solve.all_converged


def test_hopfield_structure_is_symmetric(gen: torch.Generator) -> None:
    model = DEQ(DEQConfig(8, 3, 2, structure="hopfield"), generator=gen)
    w = model.effective_weight()
    torch.testing.assert_close(w, w.T, atol=0, rtol=0)


def test_seeded_initialisation_is_reproducible() -> None:
    a = DEQ(DEQConfig(8, 3, 2), generator=torch.Generator().manual_seed(5))
    b = DEQ(DEQConfig(8, 3, 2), generator=torch.Generator().manual_seed(5))
    c = DEQ(DEQConfig(8, 3, 2), generator=torch.Generator().manual_seed(6))
    assert torch.equal(a.weight, b.weight) and not torch.equal(a.weight, c.weight)


def test_float64_by_default_float32_on_request(gen: torch.Generator) -> None:
    model = DEQ(DEQConfig(8, 3, 2), generator=gen)
    x32 = torch.randn(4, 3, generator=gen)
    assert model(x32).z.dtype == torch.float64  # input promoted, never silently float32
    model32 = model.to(torch.float32)
    assert model32(x32, atol=1e-6).z.dtype == torch.float32


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu(gen: torch.Generator) -> None:  # pragma: no cover - GPU only
    model = DEQ(DEQConfig(16, 5, 3), generator=gen)
    x = torch.randn(4, 5, generator=gen, dtype=torch.float64)
    cpu = model(x, **TIGHT).z
    gpu = model.to("cuda")(x.cuda(), **TIGHT).z.cpu()
    torch.testing.assert_close(cpu, gpu, atol=1e-10, rtol=0)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"state_size": 0}, "DEQConfig.state_size = 0"),
    ({"alpha": 1.0}, r"DEQConfig.alpha = 1.0; expected a finite number in \[0, 1\)"),
    ({"structure": "mlp"}, "DEQConfig.structure = 'mlp'"),
    ({"blocks": (3, 3)}, r"DEQConfig.blocks = \[3, 3\]; expected positive integer sizes summing to state_size = 8"),
    ({"split": 8}, r"DEQConfig.split = 8; expected an integer in \[0, 7\]"),
    ({"split": 2.5}, r"DEQConfig.split = 2.5; expected an integer"),
])
def test_bad_config_names_the_field(kwargs: dict, message: str) -> None:
    base = {"state_size": 8, "input_size": 3, "output_size": 2}
    with pytest.raises(InputError, match=message):
        DEQConfig(**{**base, **kwargs})


def test_split_routes_every_answer_through_the_feedback(gen: torch.Generator) -> None:
    """split = k: the input reaches only variables [0, k) and the readout reads only [k, N), so with W = 0
    the logits no longer depend on x, and the fixed point is the two-layer network
    z_out = (beta W_oi tanh(z_in) + ...) / (1 - alpha) when W only feeds forward; stored U and V show
    the split as zeros."""
    n, k = 9, 4
    model = DEQ(DEQConfig(n, 5, 3, alpha=0.25, split=k), beta=2.0, generator=gen)
    with torch.no_grad():  # weights that ignore the split must not leak through it
        model.inject_weight.normal_(generator=gen)
        model.readout_weight.normal_(generator=gen)
        model.inject_bias.normal_(generator=gen)
    x = torch.randn(6, 5, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        u = model.injection(x)
        assert (u[:, k:] == model.inject_bias[k:]).all()  # no input in the readout variables
        z = torch.randn(6, n, generator=gen, dtype=torch.float64)
        z_moved = z.clone()
        z_moved[:, :k] += 1.0
        torch.testing.assert_close(model.readout(z), model.readout(z_moved), atol=0, rtol=0)
        model.weight.zero_()
        logits = model(x, **TIGHT).logits
    assert (logits - logits[:1]).abs().max() < 1e-12  # W = 0: every input gives the same answer
    fresh = DEQ(DEQConfig(n, 5, 3, split=k), generator=gen)
    assert (fresh.inject_weight[k:] == 0).all() and (fresh.readout_weight[:, :k] == 0).all()
    assert (fresh.inject_weight[:k] != 0).all() and (fresh.readout_weight[:, k:] != 0).all()


def test_bad_inputs_give_one_line_errors(gen: torch.Generator) -> None:
    model = DEQ(DEQConfig(8, 3, 2), generator=gen)
    with pytest.raises(InputError, match=r"x has shape \(4, 5\); expected \[B, 3\]"):
        model(torch.zeros(4, 5))
    with pytest.raises(InputError, match=r"x has shape \(3,\)"):
        model(torch.zeros(3))
    with pytest.raises(InputError, match="x contains NaN"):
        model(torch.tensor([[0.0, float("nan"), 1.0]]))
    with pytest.raises(InputError, match=r"x = \[\[0.0, 1.0, 2.0\]\]; expected a tensor \[B, 3\]"):
        model([[0.0, 1.0, 2.0]])


def test_accuracy_without_feedback_is_the_feedforward_network() -> None:
    """With W = 0 the fixed point is (U x + b) / (1 - alpha): a model whose W is zero scores the same either way,
    and the bundled digits model's loop is worth something (its feedback-free accuracy is lower)."""
    from aocsim import load_model
    from aocsim.experiments.evaluate import accuracy_without_feedback, evaluate_deq, evaluate_model, feedforward_state
    from aocsim.tasks.digits import load_split

    model = load_model("digits-deq48")
    metrics = evaluate_model(model)
    assert metrics["accuracy_without_feedback"] < metrics["accuracy"]
    assert metrics["feedback_max"] == pytest.approx(float(model.operator().abs().max()))
    with torch.no_grad():
        model.weight.zero_()
    data = load_split(torch.float64)
    exact = evaluate_deq(model, data.x_test, data.y_test, atol=1e-12, rtol=0.0)["accuracy"]
    assert accuracy_without_feedback(model, data.x_test, data.y_test) == exact
    with torch.no_grad():
        z = model(data.x_test, atol=1e-13, rtol=0.0).z
    assert (z - feedforward_state(model, data.x_test)).abs().max() < 1e-11
