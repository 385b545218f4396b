"""The plain Mamba2 language model (issue 42): the logits of HuggingFace's Mamba2ForCausalLM with its
weights copied in (by the converter below, which only these tests use), causality, the recurrent form, its
model files and its configuration's checks."""

from __future__ import annotations

import contextlib
import types
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aocsim.errors import InputError
from aocsim.io.model_files import load_model, save_model
from aocsim.nn.mamba2_lm import Mamba2Config, Mamba2LM

CHUNK = 8  # HuggingFace's chunk size here: the sequences below are longer, so the scan crosses chunks


def _hf_config(**changes):
    transformers = pytest.importorskip("transformers")
    settings_ = {"vocab_size": 11, "hidden_size": 16, "num_hidden_layers": 2, "state_size": 8, "expand": 2,
                 "head_dim": 8, "num_heads": 4, "n_groups": 1, "conv_kernel": 4, "tie_word_embeddings": True,
                 "use_bias": False, "use_conv_bias": True, "chunk_size": CHUNK, "layer_norm_epsilon": 1e-5,
                 "residual_in_fp32": False}  # the residual stays in float64
    return transformers.Mamba2Config(**{**settings_, **changes})


def _hf_model(seed: int = 0):
    """A tiny Mamba2ForCausalLM in float64: HuggingFace's initialisation (drawn with the global RNG seeded
    inside fork_rng, so the caller's state is untouched), then every weight moved by seeded noise so that
    none keeps a neutral value (norm weights 1, D 1, conv bias 0) that would hide a weight used wrongly."""
    from transformers import Mamba2ForCausalLM

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = Mamba2ForCausalLM(_hf_config()).double().eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():  # the tied head is the embedding: moved with it
            p.add_(0.3 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    assert torch.equal(model.lm_head.weight, model.backbone.embeddings.weight)
    return model


@contextlib.contextmanager
def _huggingface_in_float64() -> Iterator[None]:
    """HuggingFace's pure-torch Mamba2 path computing in float64 on float64 weights.

    That path casts to float32 in its RMSNorms (`.to(torch.float32)`), its scan (`.float()` on x, B, C,
    dt and A_log) and its logits (`.float()`), which limits any comparison to float32 rounding
    (`test_stock_huggingface_float32_path_agrees_to_float32_rounding`). Here `torch.float32`, as that
    module reads it, is float64, and `Tensor.float` leaves float64 tensors as they are: the same
    operations in the same order, without the casts.
    """
    import transformers.models.mamba2.modeling_mamba2 as hf

    plain_float = torch.Tensor.float
    module_torch = hf.torch
    hf.torch = types.SimpleNamespace(**{**{k: getattr(torch, k) for k in dir(torch) if not k.startswith("__")},
                                        "float32": torch.float64})
    torch.Tensor.float = lambda self, *a, **k: self if self.dtype == torch.float64 else plain_float(self, *a, **k)
    try:
        yield
    finally:
        torch.Tensor.float = plain_float
        hf.torch = module_torch


def _tokens(gen: torch.Generator, batch: int, length: int, vocab: int = 11) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, length), generator=gen)


def config_from_hf(hf: Any) -> Mamba2Config:
    """The Mamba2Config of a HuggingFace `Mamba2Config` (read by attribute; transformers is not imported).

    Refuses what this model does not compute: untied head, biases on the projections, no conv bias,
    an activation other than SiLU, a clamp on dt, n_groups other than 1.
    """
    unsupported = {"tie_word_embeddings": (getattr(hf, "tie_word_embeddings", True), True),
                   "use_bias": (hf.use_bias, False), "use_conv_bias": (hf.use_conv_bias, True),
                   "hidden_act": (hf.hidden_act, "silu"),
                   "time_step_limit": (tuple(hf.time_step_limit), (0.0, float("inf")))}
    bad = {k: v for k, (v, want) in unsupported.items() if v != want}
    if bad:
        raise InputError(f"HuggingFace Mamba2 config with {bad}; expected "
                         f"{ {k: want for k, (_, want) in unsupported.items() if k in bad} }")
    return Mamba2Config(vocab_size=hf.vocab_size, d_model=hf.hidden_size, n_layers=hf.num_hidden_layers,
                        d_state=hf.state_size, expand=hf.expand, head_dim=hf.head_dim, n_groups=hf.n_groups,
                        conv_kernel=hf.conv_kernel, eps=hf.layer_norm_epsilon)


# HuggingFace Mamba2ForCausalLM name (per layer: after "backbone.layers.{i}.") -> ours (after "blocks.{i}.")
_HF_LAYER = {"norm.weight": "norm.weight", "mixer.in_proj.weight": "in_proj.weight",
             "mixer.conv1d.weight": "conv_weight", "mixer.conv1d.bias": "conv_bias", "mixer.dt_bias": "dt_bias",
             "mixer.A_log": "A_log", "mixer.D": "D", "mixer.norm.weight": "out_norm.weight",
             "mixer.out_proj.weight": "out_proj.weight"}


def from_hf_state_dict(state: dict[str, torch.Tensor], config: Mamba2Config) -> Mamba2LM:
    """A Mamba2LM with the weights of a HuggingFace Mamba2ForCausalLM's `state_dict()`, in their dtype.

    The tied head (lm_head.weight) must equal the embedding; any tensor left unmapped is an error.
    """
    rest = dict(state)
    ours = {"embedding.weight": rest.pop("backbone.embeddings.weight"),
            "final_norm.weight": rest.pop("backbone.norm_f.weight")}
    for i in range(config.n_layers):
        for theirs, mine in _HF_LAYER.items():
            ours[f"blocks.{i}.{mine}"] = rest.pop(f"backbone.layers.{i}.{theirs}")
        conv = ours[f"blocks.{i}.conv_weight"]
        ours[f"blocks.{i}.conv_weight"] = conv.reshape(conv.shape[0], conv.shape[-1])  # [C, 1, K] -> [C, K]
    head = rest.pop("lm_head.weight", None)
    if head is not None and not torch.equal(head, ours["embedding.weight"]):
        raise InputError("lm_head.weight differs from the embedding; expected a head tied to the embedding")
    if rest:
        raise InputError(f"HuggingFace tensors this model has no place for: {sorted(rest)}")
    model = Mamba2LM(config).to(ours["embedding.weight"].dtype)
    model.load_state_dict(ours)
    return model


def _copy(hf_model) -> Mamba2LM:
    return from_hf_state_dict(hf_model.state_dict(), config_from_hf(hf_model.config)).eval()


def test_logits_equal_huggingface_mamba2_in_float64(gen: torch.Generator) -> None:
    """Measured 3.1e-15 at logits up to 4.2 (float64 rounding: the two scans sum in different orders)."""
    hf = _hf_model()
    ours = _copy(hf)
    assert next(ours.parameters()).dtype == torch.float64
    worst = 0.0
    for batch, length in ((3, 29), (2, 64), (4, 3)):  # across chunks, whole chunks, shorter than one
        tokens = _tokens(gen, batch, length)
        with torch.no_grad(), _huggingface_in_float64():
            theirs = hf(tokens).logits
        assert theirs.dtype == torch.float64
        for chunk in (CHUNK, 5, 64):  # our scan's chunk is a free choice
            with torch.no_grad():
                worst = max(worst, float((ours(tokens, chunk=chunk) - theirs).abs().max()))
    assert worst <= 1e-10, worst


def test_stock_huggingface_float32_path_agrees_to_float32_rounding(gen: torch.Generator) -> None:
    hf = _hf_model(seed=3)
    ours = _copy(hf)
    tokens = _tokens(gen, 2, 40)
    with torch.no_grad():
        theirs, mine = hf(tokens).logits, ours(tokens)
    assert theirs.dtype == torch.float32  # its casts, not the weights, set the precision
    assert float((mine - theirs.double()).abs().max()) < 1e-4 * float(mine.abs().max())


def _model(seed: int = 0, **config) -> Mamba2LM:
    c = {"vocab_size": 7, "d_model": 16, "n_layers": 2, "d_state": 4, "head_dim": 8, **config}
    model = Mamba2LM(Mamba2Config(**c), generator=torch.Generator().manual_seed(seed)).double().eval()
    with torch.no_grad():  # larger than the initial 0.02 so that the tokens matter visibly
        model.embedding.weight.mul_(50.0)
    return model


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 3), length=st.integers(2, 40), where=st.data())
def test_a_token_changes_no_logit_before_it(seed: int, length: int, where: st.DataObject) -> None:
    model = _model(seed)
    t = where.draw(st.integers(0, length - 1), label="t")
    g = torch.Generator().manual_seed(seed * 1000 + length)
    tokens = _tokens(g, 2, length, vocab=7)
    other = tokens.clone()
    other[:, t] = (other[:, t] + where.draw(st.integers(1, 6), label="shift")) % 7
    with torch.no_grad():
        a, b = model(tokens, chunk=8), model(other, chunk=8)
    assert torch.equal(a[:, :t], b[:, :t])
    assert float((a[:, t] - b[:, t]).abs().max()) > 1e-6  # the token itself is seen at its position


def test_recurrent_form_equals_the_chunked_scan(gen: torch.Generator) -> None:
    model = _model(1)
    tokens = _tokens(gen, 3, 21, vocab=7)
    caches, steps = model.init_caches(3), []
    with torch.no_grad():
        whole = model(tokens, chunk=4)
        for t in range(tokens.shape[1]):
            logits, caches = model.step(tokens[:, t], caches)
            steps.append(logits)
    assert float((torch.stack(steps, 1) - whole).abs().max()) < 1e-12


def test_a_forward_hook_on_a_block_sees_every_block_output(gen: torch.Generator) -> None:
    """The whole-sequence pass calls each block as a module: a hook a user puts on a block (to read its
    residual update, as with any PyTorch model) fires once per block with the update it adds."""
    model = _model(2)
    tokens = _tokens(gen, 2, 9, vocab=7)
    seen: list[torch.Tensor] = []
    handles = [block.register_forward_hook(lambda module, args, out: seen.append(out)) for block in model.blocks]
    with torch.no_grad():
        hidden = model.hidden(tokens, chunk=4)
    for handle in handles:
        handle.remove()
    assert len(seen) == 2 and all(o.shape == hidden.shape for o in seen)
    assert torch.equal(model.embedding(tokens) + seen[0] + seen[1], hidden)


def test_model_files_round_trip_by_kind(tmp_path: Path, gen: torch.Generator) -> None:
    model = _model(2)
    card = {"name": "m2", "kind": "mamba2", "config": model.config.to_dict()}
    loaded = load_model(save_model(model, tmp_path / "m2", card))
    assert isinstance(loaded, Mamba2LM) and loaded.config == model.config
    assert "head.weight" not in loaded.state_dict()  # tied: the embedding is the head
    tokens = _tokens(gen, 2, 12, vocab=7)
    with torch.no_grad():
        assert torch.equal(loaded(tokens), model(tokens))


def test_configuration_and_input_errors() -> None:
    with pytest.raises(InputError, match=r"^Mamba2Config.n_groups = 2; only one B/C group"):
        Mamba2Config(vocab_size=5, n_groups=2)
    with pytest.raises(InputError, match=r"head_dim = 16 must divide d_inner = 24"):
        Mamba2Config(vocab_size=5, d_model=12)
    with pytest.raises(InputError, match=r"eps = 0"):
        Mamba2Config(vocab_size=5, eps=0)
    model = _model()
    with pytest.raises(InputError, match=r"token id 7 is outside the vocabulary \[0, 6\]"):
        model(torch.tensor([[0, 7]]))
    with pytest.raises(InputError, match=r"^tokens must be a non-empty integer tensor"):
        model(torch.zeros(1, 3))


def test_huggingface_configurations_it_does_not_compute_are_refused() -> None:
    with pytest.raises(InputError, match=r"'use_bias': True"):
        config_from_hf(_hf_config(use_bias=True))
    with pytest.raises(InputError, match=r"'tie_word_embeddings': False"):
        config_from_hf(_hf_config(tie_word_embeddings=False))
    hf = _hf_model()
    state = {**hf.state_dict(), "backbone.extra": torch.zeros(1)}
    with pytest.raises(InputError, match=r"no place for: \['backbone.extra'\]"):
        from_hf_state_dict(state, config_from_hf(hf.config))
