"""Gradients of equilibrium layers: implicit (gradcheck), phantom, unrolled."""

from __future__ import annotations

import pytest
import torch

from aocsim import DEQ, DEQConfig, Implicit, Phantom, Unrolled
from aocsim.errors import InputError
from aocsim.solve import equilibrium

TIGHT = {"solver": "anderson", "atol": 1e-13, "rtol": 0.0, "max_iter": 500}


def small_deq(gen: torch.Generator, beta: float = 0.3) -> DEQ:
    model = DEQ(DEQConfig(state_size=6, input_size=4, output_size=3, alpha=0.5), beta=beta, generator=gen)
    with torch.no_grad():
        model.weight.copy_(torch.randn(6, 6, generator=gen, dtype=torch.float64) / 6)
    return model


def test_implicit_backward_passes_gradcheck(gen: torch.Generator) -> None:
    model = small_deq(gen)
    x = torch.randn(3, 4, generator=gen, dtype=torch.float64)

    def fn(weight: torch.Tensor, inject: torch.Tensor, x_in: torch.Tensor) -> torch.Tensor:
        u = x_in @ inject.T
        step = lambda z: 0.5 * z + torch.tanh(z) @ (0.3 * weight).T + u  # noqa: E731
        z, _ = equilibrium(step, torch.zeros_like(u), backward=Implicit(), **TIGHT)
        return z

    args = (model.weight.detach().clone().requires_grad_(), model.inject_weight.detach().clone().requires_grad_(),
            x.clone().requires_grad_())
    assert torch.autograd.gradcheck(fn, args, eps=1e-6, atol=1e-7, rtol=1e-5)


def test_implicit_gradient_of_the_model_matches_finite_differences(gen: torch.Generator) -> None:
    model = small_deq(gen)
    x = torch.randn(5, 4, generator=gen, dtype=torch.float64)
    y = torch.tensor([0, 1, 2, 1, 0])
    loss = torch.nn.functional.cross_entropy(model(x, backward=Implicit(), **TIGHT).logits, y)
    (g_beta,) = torch.autograd.grad(loss, model.beta)
    eps = 1e-6
    with torch.no_grad():
        values = []
        for sign in (1, -1):
            model.beta.add_(sign * eps)
            values.append(torch.nn.functional.cross_entropy(model(x, **TIGHT).logits, y))
            model.beta.sub_(sign * eps)
    assert g_beta.item() == pytest.approx(((values[0] - values[1]) / (2 * eps)).item(), rel=1e-6, abs=1e-9)


def _param_grad(model: DEQ, x: torch.Tensor, y: torch.Tensor, backward) -> torch.Tensor:
    model.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x, backward=backward, **TIGHT).logits, y)
    loss.backward()
    return torch.cat([p.grad.flatten() for p in (model.weight, model.beta, model.inject_weight)])


def test_phantom_gradient_approaches_implicit_as_k_grows(gen: torch.Generator) -> None:
    model = small_deq(gen, beta=0.45)
    x = torch.randn(16, 4, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 3, (16,), generator=gen)
    exact = _param_grad(model, x, y, Implicit())
    cos = []
    for k in (1, 2, 4, 8, 16, 32):
        g = _param_grad(model, x, y, Phantom(steps=k, damping=0.8))
        cos.append(torch.nn.functional.cosine_similarity(g, exact, dim=0).item())
    print("phantom cosine vs implicit, k = 1, 2, 4, 8, 16, 32:", [round(c, 6) for c in cos])
    assert all(b >= a - 1e-9 for a, b in zip(cos, cos[1:]))  # non-decreasing in k
    assert cos[-1] > 1 - 1e-6
    assert cos[0] < cos[-1]


def test_unrolled_gradient_matches_implicit_for_long_unroll(gen: torch.Generator) -> None:
    model = small_deq(gen)
    x = torch.randn(8, 4, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 3, (8,), generator=gen)
    exact = _param_grad(model, x, y, Implicit())
    unrolled = _param_grad(model, x, y, Unrolled(steps=200))
    torch.testing.assert_close(unrolled, exact, atol=1e-9, rtol=1e-7)


def test_no_graph_in_inference_mode(gen: torch.Generator) -> None:
    model = small_deq(gen)
    with torch.no_grad():
        out = model(torch.randn(2, 4, generator=gen, dtype=torch.float64))
    assert not out.z.requires_grad


@pytest.mark.parametrize(("factory", "message"), [
    (lambda: Phantom(steps=0), "phantom.steps = 0"),
    (lambda: Phantom(damping=0.0), "phantom.damping = 0.0"),
    (lambda: Unrolled(steps=-3), "unrolled.steps = -3"),
])
def test_bad_backward_settings(factory, message: str) -> None:
    with pytest.raises(InputError, match=message):
        factory()


def test_backward_must_be_an_object() -> None:
    with pytest.raises(InputError, match="backward = 'implicit'"):
        equilibrium(lambda z: 0.5 * z, torch.zeros(1, 2), backward="implicit")
