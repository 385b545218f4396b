"""Hardware-aware training of implicit SSMs (aocsim/train/hardware_aware.py)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from aocsim.errors import InputError
from aocsim.nn.implicit_ssm import ImplicitSSM, SSMConfig
from aocsim.train import state_tracking
from aocsim.train.hardware_aware import attach, quantize_weight
from aocsim.train.recipes import STATE_TRACKING


def _model() -> ImplicitSSM:
    return ImplicitSSM(SSMConfig(vocab_size=2, d_model=16, d_state=4, head_dim=8), generator=torch.Generator()
                       .manual_seed(0)).double()


def test_weights_land_on_a_signed_grid_of_the_given_bits() -> None:
    w = torch.randn(40, 30, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    for bits in (2, 4, 9):
        q = quantize_weight(w, bits)
        levels = 2 ** (bits - 1) - 1
        step = float(w.abs().max()) / levels
        assert len(torch.unique(q)) <= 2 * levels + 1
        assert float((q - w).abs().max()) <= step / 2 + 1e-12
        assert float(q.abs().max()) == pytest.approx(float(w.abs().max()))


def test_hooks_add_noise_of_the_set_size_with_straight_through_gradients() -> None:
    model = _model()
    tokens = torch.randint(0, 2, (64, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        plain = model.injection(tokens)
        handles = attach(model, weight_bits=None, noise=0.05, generator=torch.Generator().manual_seed(3))
        noisy = model.injection(tokens)
    for h in handles:
        h.remove()
    ratio = float((noisy - plain).std()) / (0.05 * float(plain.abs().max()))
    assert abs(ratio - 1) < 4 / (2 * plain.numel()) ** 0.5
    with torch.no_grad():
        assert torch.equal(model.injection(tokens), plain)  # removed: the plain model again

    def grads(bits: int | None) -> tuple[torch.Tensor, torch.Tensor]:
        m = _model()
        handles = attach(m, weight_bits=bits, noise=0.0, generator=torch.Generator().manual_seed(3))
        u = m.injection(tokens)
        (u.square().sum()).backward()
        for h in handles:
            h.remove()
        return u.detach(), m.inject.parametrizations.weight.original1.grad.clone()

    (u_plain, g_plain), (u_q, g_q) = grads(None), grads(3)
    assert not torch.allclose(u_plain, u_q)  # 3-bit weights change the map ...
    # ... and the gradient is that of the full-precision map at the quantised map's output
    m = _model()
    u = m.injection(tokens)
    (2 * u_q * u).sum().backward()
    assert torch.allclose(m.inject.parametrizations.weight.original1.grad, g_q, atol=1e-12)
    assert not torch.allclose(g_plain, g_q)


def test_a_hardware_aware_run_is_reproducible_and_differs_from_the_plain_one() -> None:
    short = dataclasses.replace(STATE_TRACKING["parity-implicit-hw"], steps=6, tied_fraction=0.5, batch_size=4)
    first, _ = state_tracking.train(short, progress=False)
    again, _ = state_tracking.train(short, progress=False)
    plain, _ = state_tracking.train(dataclasses.replace(short, hw_weight_bits=None, hw_noise=0.0), progress=False)
    a, b, c = (m.state_dict() for m in (first, again, plain))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a)
    assert not any(m._forward_hooks for m in first.modules())  # the saved model runs plainly


@pytest.mark.parametrize("change, message", [({"hw_noise": 1.5}, "hw_noise = 1.5; expected in [0, 1)"),
                                             ({"hw_weight_bits": 1}, "hw_weight_bits = 1; expected an integer")])
def test_bad_hardware_settings_are_one_line_errors(change: dict, message: str) -> None:
    with pytest.raises(InputError, match=message.replace("[", r"\[").replace(")", r"\)")):
        dataclasses.replace(STATE_TRACKING["parity-implicit"], **change)


@pytest.mark.slow
def test_hardware_aware_digits_quantises_beta_w_and_reproduces() -> None:
    from aocsim.nn.deq import DEQ, DEQConfig
    from aocsim.tasks.digits import load_split
    from aocsim.train.digits import DigitsDEQRecipe, train_digits_deq
    from aocsim.train.hardware_aware import deq_logits

    model = DEQ(DEQConfig(48, 64, 10, alpha=0.5), generator=torch.Generator().manual_seed(0))
    x = load_split().x_train[:32]
    opts = {"solver": "anderson", "atol": 1e-12, "rtol": 0.0, "max_iter": 200}
    plain = model(x, **opts).logits
    same = deq_logits(model, x, weight_bits=None, noise=0.0, generator=torch.Generator(), **opts)
    assert torch.allclose(same, plain, atol=1e-10)  # no errors: the model itself
    coarse = deq_logits(model, x, weight_bits=3, noise=0.0, generator=torch.Generator(), **opts)
    assert not torch.allclose(coarse, plain, atol=1e-6)
    coarse.sum().backward()  # straight-through: W still gets a gradient
    assert model.weight.grad is not None and float(model.weight.grad.abs().sum()) > 0
    short = DigitsDEQRecipe(epochs=1, hw_weight_bits=9, hw_noise=0.15, name="digits-deq48-hw")
    a, b = train_digits_deq(short, progress=False)[0], train_digits_deq(short, progress=False)[0]
    c = train_digits_deq(DigitsDEQRecipe(epochs=1), progress=False)[0]
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not all(torch.equal(p, q) for p, q in zip(a.parameters(), c.parameters()))


def test_fine_tuning_starts_from_the_given_model_and_refuses_another_architecture() -> None:
    """`init`: the run starts from the trained weights (its first step's accuracy is the trained model's,
    not chance), and a model of another architecture is a one-line error before any step."""
    from aocsim.io.model_files import load_model

    tuned = dataclasses.replace(STATE_TRACKING["parity-implicit"], steps=1, tied_fraction=0.0, batch_size=16,
                                init="parity-implicit", lr=1e-12, warmup_steps=1)
    model, log = state_tracking.train(tuned, progress=False)
    assert log["history"][0]["train_acc"] == 1.0  # a fresh start is at chance (about 0.5)
    start = load_model("parity-implicit").state_dict()
    assert all(torch.allclose(model.state_dict()[k].double(), v.double(), atol=1e-6) for k, v in start.items())
    with pytest.raises(InputError, match="init = 'a5-implicit': its config .* is not the recipe's"):
        state_tracking.train(dataclasses.replace(tuned, init="a5-implicit"), progress=False)
