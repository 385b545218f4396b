"""Implicit SSM: scan parity, the two execution modes, training pieces, committed models, bad input."""

from __future__ import annotations

from pathlib import Path

import h5py
import pytest
import torch

from aocsim import load_model
from aocsim.errors import InputError, ModelFileError
from aocsim.experiments.evaluate import state_tracking_recipe
from aocsim.io.model_files import bundled_models
from aocsim.nn.implicit_ssm import ImplicitSSM, SSMConfig
from aocsim.nn.ssm_scan import chunked_scan, naive_scan
from aocsim.tasks.groups import group, word_problems
from aocsim.train.state_tracking import StateTrackingRecipe, train, write_checkpoint


def _scan_inputs(gen: torch.Generator, b=2, L=37, h=3, p=4, n=5):
    d = torch.float64
    x = torch.randn(b, L, h, p, generator=gen, dtype=d, requires_grad=True)
    dt = torch.nn.functional.softplus(torch.randn(b, L, h, generator=gen, dtype=d)).requires_grad_()
    A = (-torch.rand(h, generator=gen, dtype=d) - 0.1).requires_grad_()
    bm = torch.randn(b, L, n, generator=gen, dtype=d, requires_grad=True)
    cm = torch.randn(b, L, n, generator=gen, dtype=d, requires_grad=True)
    D = torch.randn(h, generator=gen, dtype=d, requires_grad=True)
    s0 = torch.randn(b, h, p, n, generator=gen, dtype=d)
    return x, dt, A, bm, cm, D, s0


@pytest.mark.parametrize("chunk", [1, 5, 8, 37, 64])
def test_chunked_scan_equals_the_recurrence_with_gradients(chunk: int, gen: torch.Generator) -> None:
    args = _scan_inputs(gen)
    y1, h1 = naive_scan(*args)
    y2, h2 = chunked_scan(*args, chunk=chunk)
    assert (y1 - y2).abs().max() < 1e-10 and (h1 - h2).abs().max() < 1e-10
    inputs = args[:6]
    g1 = torch.autograd.grad((y1 ** 2).sum() + h1.sum(), inputs)
    g2 = torch.autograd.grad((y2 ** 2).sum() + h2.sum(), inputs)
    for a, b in zip(g1, g2):
        assert (a - b).abs().max() < 1e-10


def _contractive_model(n_layers: int = 2, vocab: int = 5) -> ImplicitSSM:
    cfg = SSMConfig(vocab_size=vocab, d_model=16, d_state=4, head_dim=8, n_layers=n_layers, weight_norm=False)
    model = ImplicitSSM(cfg, generator=torch.Generator().manual_seed(0)).double()
    with torch.no_grad():  # small z-dependence, large update: f is a contraction
        for block in model.blocks:
            block.in_proj.weight.mul_(0.1)
            block.out_proj.weight.mul_(10.0)
    return model


def test_simultaneous_and_sequential_fixed_points_agree_when_contractive() -> None:
    model = _contractive_model()
    tokens = torch.randint(0, 5, (3, 40), generator=torch.Generator().manual_seed(1))
    sim = model(tokens, mode="simultaneous", tol=1e-13, max_iter=500)
    seq = model(tokens, mode="sequential", tol=1e-13, max_iter=500)
    assert (sim.residuals <= 1e-13).all() and (seq.residuals <= 1e-13).all()
    assert (sim.z - seq.z).abs().max() < 1e-8
    assert sim.iterations.shape == seq.iterations.shape == (3, 40)
    assert (seq.iterations > 0).all()


def test_explicit_model_is_one_pass_and_its_modes_coincide() -> None:
    cfg = SSMConfig(vocab_size=6, d_model=16, d_state=4, head_dim=8, n_layers=3, implicit=False)
    model = ImplicitSSM(cfg, generator=torch.Generator().manual_seed(3)).double()
    tokens = torch.randint(0, 6, (2, 30), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        one_pass = model.f(torch.zeros(2, 30, 16, dtype=torch.float64), model.injection(tokens))
        out = model(tokens)
        # token-by-token (the RNN form) gives the same states as the whole-sequence form
        caches = [b.init_cache(2, one_pass) for b in model.blocks]
        u = model.injection(tokens)
        rnn = []
        for t in range(30):
            z_t, caches = model.f_token(torch.zeros(2, 16, dtype=torch.float64), u[:, t], caches)
            rnn.append(z_t)
    assert torch.equal(out.z, one_pass)
    assert (torch.stack(rnn, 1) - one_pass).abs().max() < 1e-12


def test_seeded_initialisation_leaves_global_rng_alone() -> None:
    state = torch.random.get_rng_state()
    a = ImplicitSSM(SSMConfig(vocab_size=4), generator=torch.Generator().manual_seed(5))
    b = ImplicitSSM(SSMConfig(vocab_size=4), generator=torch.Generator().manual_seed(5))
    assert torch.equal(state, torch.random.get_rng_state())
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_training_reduces_the_loss_and_is_reproducible(tmp_path: Path) -> None:
    r = StateTrackingRecipe(name="tiny", task="parity", implicit=True, steps=40, train_length=8, d_model=16,
                            d_state=4, head_dim=8, batch_size=16, tied_fraction=0.5, deq_iters=4, phantom_steps=2)
    torch.set_num_threads(1)
    m1, s1 = train(r, progress=False, run_dir=tmp_path / "run")
    m2, _ = train(r, progress=False)
    assert all(torch.equal(x, y) for x, y in zip(m1.state_dict().values(), m2.state_dict().values()))
    losses = [e["loss"] for e in s1["history"]]
    assert losses[-1] < losses[0]
    assert (tmp_path / "run" / "metrics.jsonl").read_text().count("\n") >= 1
    write_checkpoint(m1, tmp_path / "ck.h5", 40, s1["history"][-1])
    with h5py.File(tmp_path / "ck.h5") as h5:
        assert h5.attrs["step"] == 40
        assert torch.equal(torch.from_numpy(h5["head.weight"][()]), m1.head.weight.detach())


def test_jacobian_penalty_estimates_the_frobenius_norm_and_trains_it() -> None:
    from aocsim.train.state_tracking import _jacobian_penalty
    model = ImplicitSSM(SSMConfig(vocab_size=4, d_model=6, d_state=2, head_dim=4),
                        generator=torch.Generator().manual_seed(1)).double()
    gen = torch.Generator().manual_seed(2)
    tokens = torch.randint(0, 4, (2, 3), generator=gen)
    u = model.injection(tokens)
    z = 0.5 * torch.randn(2, 3, 6, generator=gen, dtype=torch.float64)
    jac = torch.autograd.functional.jacobian(lambda s: model.f(s, u.detach()), z)
    exact = float(jac.pow(2).sum()) / z.numel()  # ||J||_F^2 per state variable
    probes = torch.stack([_jacobian_penalty(model, z, u, gen).detach() for _ in range(400)])
    assert abs(float(probes.mean()) - exact) <= 5 * float(probes.std()) / 400 ** 0.5
    penalty = _jacobian_penalty(model, z, u, gen)
    penalty.backward()  # differentiable in the weights (double backward through f)
    assert model.blocks[0].in_proj.parametrizations.weight.original1.grad.abs().sum() > 0


STATE_MODELS = [m for m in bundled_models() if m.startswith(("parity-", "a5-"))]


@pytest.mark.parametrize("name", STATE_MODELS)
def test_committed_models_load_and_their_modes_agree(name: str) -> None:
    model = load_model(name)
    r = state_tracking_recipe(model)
    tokens, targets = word_problems(group(r.task), 32, 2 * r.train_length, identity_prob=r.identity_prob,
                                    generator=99)
    sim = model.predict(tokens, mode="simultaneous", tau=r.tau, tol=r.eval_tol, max_iter=r.eval_max_iter)
    seq = model.predict(tokens, mode="sequential", tau=r.tau, tol=r.eval_tol, max_iter=r.eval_max_iter)
    assert sim.shape == targets.shape and sim.dtype == torch.int64
    assert float((sim == seq).double().mean()) >= 0.99
    card_acc = model.card["metrics"]["1L"]["simultaneous"]["accuracy"]
    short = model.predict(tokens[:, : r.train_length], mode="simultaneous", tau=r.tau, tol=r.eval_tol,
                          max_iter=r.eval_max_iter)
    acc = float((short == targets[:, : r.train_length]).double().mean())
    assert abs(acc - card_acc) < 0.1  # 32 fresh sequences against the card's 256


def test_parity_implicit_extrapolates_and_explicit_does_not() -> None:
    if not {"parity-implicit", "parity-explicit2"} <= set(bundled_models()):
        pytest.skip("parity models not bundled")
    implicit, explicit = load_model("parity-implicit"), load_model("parity-explicit2")
    r = state_tracking_recipe(implicit)
    tokens, targets = word_problems(group("parity"), 64, 4 * r.train_length, identity_prob=0.5, generator=7)
    acc_i = float((implicit.predict(tokens, mode="sequential") == targets).double().mean())
    acc_e = float((explicit.predict(tokens, mode="sequential") == targets).double().mean())
    assert acc_i >= 0.95 and acc_e < 0.85


def _model() -> ImplicitSSM:
    return ImplicitSSM(SSMConfig(vocab_size=4, d_model=16, d_state=4, head_dim=8))


@pytest.mark.parametrize(("tokens", "message"), [
    (torch.tensor([[0, 1, 4]]), r"token id 4 is outside the vocabulary \[0, 3\]"),
    (torch.tensor([[0, -1, 2]]), r"token id -1 is outside the vocabulary"),
    (torch.zeros(2, 0, dtype=torch.int64), r"tokens has shape \(2, 0\); expected a non-empty \[B, L\]"),
    (torch.zeros(0, 5, dtype=torch.int64), r"tokens has shape \(0, 5\)"),
    (torch.zeros(5, dtype=torch.int64), r"tokens has shape \(5,\)"),
    (torch.zeros(2, 3), r"tokens must be an integer tensor \[B, L\]; got Tensor torch.float32"),
])
def test_bad_tokens(tokens: torch.Tensor, message: str) -> None:
    with pytest.raises(InputError, match=message):
        _model().predict(tokens)


def test_unknown_mode() -> None:
    with pytest.raises(InputError, match=r"mode = 'parallel'; expected one of \['simultaneous', 'sequential'\]"):
        _model().predict(torch.zeros(1, 3, dtype=torch.int64), mode="parallel")


def test_bad_solver_settings() -> None:
    tokens = torch.zeros(1, 3, dtype=torch.int64)
    with pytest.raises(InputError, match=r"tau = 0.0; expected a damping in \(0, 1\]"):
        _model().predict(tokens, tau=0.0)
    with pytest.raises(InputError, match="max_iter = -1"):
        _model().predict(tokens, max_iter=-1)


def test_model_card_for_another_task() -> None:
    if "parity-implicit" not in bundled_models():
        pytest.skip("parity model not bundled")
    with pytest.raises(ModelFileError, match=r"model card is for task 'Z2' \(vocabulary 2\); task 'A5' has 60"):
        state_tracking_recipe(load_model("parity-implicit"), "A5")


def test_bad_config() -> None:
    with pytest.raises(InputError, match="SSMConfig.head_dim = 7 must divide d_inner = 32"):
        SSMConfig(vocab_size=4, d_model=16, head_dim=7)
    with pytest.raises(InputError, match="SSMConfig.n_layers = 0"):
        SSMConfig(vocab_size=4, n_layers=0)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("jac_reg", -0.1, r"jac_reg = -0.1; expected >= 0"),
    ("tau", 1.5, r"tau = 1.5; expected in \(0, 1\]"),
    ("steps", 0, r"steps = 0; expected an integer >= 1"),
])
def test_bad_recipe_settings(field: str, value: float, message: str) -> None:
    with pytest.raises(InputError, match=message):
        StateTrackingRecipe(name="x", task="parity", implicit=True, **{field: value})
