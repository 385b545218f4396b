"""Character-level language models (issue 24): the pydoc corpus, its split and vocabulary, next-character
targets, bits per character, the charlm recipes, generation and their command-line errors."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from aocsim.cli import main
from aocsim.errors import InputError
from aocsim.experiments.generate import ExactNextLogits, generate
from aocsim.io.model_files import bundled_models, load_model
from aocsim.nn.implicit_ssm import ImplicitSSM, SSMConfig
from aocsim.nn.mamba2_lm import Mamba2LM
from aocsim.tasks.corpus import UNKNOWN_CHAR, Vocabulary, make_corpus, pydoc_corpus
from aocsim.train import language
from aocsim.train.evaluation import bits_per_character, evaluate_bits
from aocsim.train.loop import new_model
from aocsim.train.recipes import LANGUAGE

TINY = {"d_model": 8, "d_state": 4, "head_dim": 8, "batch_size": 8, "train_length": 16, "eval_length": 16,
        "warmup_steps": 5, "eval_tol": 1e-6, "eval_max_iter": 200}


def run(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny explicit language model trained on a short periodic text, saved with its card."""
    corpus = make_corpus("the cat sat. " * 60, min_count=1)
    r = language.LanguageRecipe(name="tiny-lm", implicit=False, steps=30, lr=1e-2, **TINY)
    return language.run_recipe(r, tmp_path_factory.mktemp("lm") / "tiny-lm", progress=False, corpus=corpus)


def test_vocabulary_is_the_training_splits_frequent_characters_plus_unknown() -> None:
    corpus = pydoc_corpus()
    counts = Counter(corpus.text[: corpus.split])
    assert corpus.vocabulary.chars == "".join(sorted(c for c, n in counts.items() if n >= 3))
    assert corpus.vocabulary.unknown_id == len(corpus.vocabulary.chars) == corpus.vocabulary.size - 1
    assert corpus.split == int(0.9 * len(corpus.text)) and len(corpus.text) > 400_000


def test_encode_decode_round_trip_and_unknown_characters() -> None:
    vocab = pydoc_corpus().vocabulary
    text = pydoc_corpus().text[1000:3000]
    assert vocab.decode(vocab.encode(text)) == text
    ids = vocab.encode("aé\x00b")
    assert ids.tolist() == [vocab.chars.index("a"), vocab.unknown_id, vocab.unknown_id, vocab.chars.index("b")]
    assert vocab.decode(ids) == f"a{UNKNOWN_CHAR}{UNKNOWN_CHAR}b"
    assert vocab.unknown_characters("aé\x00bé") == ["é", "\x00"]
    with pytest.raises(InputError, match=r"^character 'é' \(U\+00E9\) is not in the vocabulary"):
        vocab.encode("aé", strict=True)
    for bad in (-1, vocab.size):
        with pytest.raises(InputError, match=rf"^token id {bad} is outside the vocabulary \[0, {vocab.unknown_id}\]$"):
            vocab.decode([0, bad])
    with pytest.raises(InputError, match="expected a string"):
        vocab.encode(b"bytes")
    with pytest.raises(InputError, match="distinct characters"):
        Vocabulary("aa")


def test_training_windows_lie_in_the_training_split_and_reach_its_end() -> None:
    corpus = make_corpus("0123456789" + "abc", heldout_fraction=0.2, min_count=1)
    assert corpus.split == 10 and corpus.vocabulary.chars == "0123456789"  # held-out characters are unknown
    inputs, targets = corpus.sample(np.random.default_rng(0), 2000, 4)
    windows = torch.cat([inputs, targets[:, -1:]], 1)
    assert int(windows.max()) < corpus.vocabulary.unknown_id  # no held-out character, input or target
    assert set(inputs[:, 0].tolist()) == set(range(6))  # every start whose window fits, the last one too
    again, _ = corpus.sample(np.random.default_rng(0), 2000, 4)
    assert torch.equal(inputs, again)
    with pytest.raises(InputError, match="length = 10"):
        corpus.sample(np.random.default_rng(0), 1, 10)


def test_targets_are_the_next_characters_of_the_training_text() -> None:
    corpus = pydoc_corpus()
    inputs, targets = corpus.sample(np.random.default_rng(3), 16, 64)
    train_text = corpus.text[: corpus.split]
    for x, y in zip(inputs, targets):
        seen, nxt = corpus.vocabulary.decode(x), corpus.vocabulary.decode(y)
        assert seen[1:] == nxt[:-1]  # position t's target is input t + 1
        assert seen + nxt[-1] in train_text


def test_heldout_windows_are_the_heldout_text_in_order() -> None:
    corpus = pydoc_corpus()
    inputs, targets = corpus.heldout_windows(256)
    heldout = corpus.text[corpus.split:]
    assert len(inputs) == (len(heldout) - 1) // 256
    assert torch.equal(inputs[1:, 0], targets[:-1, -1])  # each window's last target starts the next
    rebuilt = "".join(corpus.vocabulary.decode(x) for x in inputs) + corpus.vocabulary.decode(targets[-1, -1:])
    assert rebuilt == heldout[: len(rebuilt)] and len(heldout) - len(rebuilt) < 256


def test_uniform_model_scores_log2_of_the_vocabulary_in_both_modes() -> None:
    v = 7
    bits = bits_per_character(torch.zeros(3, 5, v), torch.randint(0, v, (3, 5), generator=torch.Generator()))
    assert bits.dtype == torch.float64 and float((bits - math.log2(v)).abs().max()) <= 4e-16
    model = ImplicitSSM(SSMConfig(vocab_size=v, d_model=8, d_state=4, head_dim=8),
                        generator=torch.Generator().manual_seed(0)).eval()
    with torch.no_grad():  # logits 0: every class equally likely
        model.head.weight.zero_()
        model.head.bias.zero_()
    windows = torch.randint(0, v, (4, 11), generator=torch.Generator().manual_seed(1))
    r = language.LanguageRecipe(name="u", implicit=True, **TINY)
    out = evaluate_bits(model, r, windows[:, :-1], windows[:, 1:])
    for mode in ("simultaneous", "sequential"):
        assert out[mode]["bits_per_character"] == pytest.approx(math.log2(v), rel=1e-14)
        assert out[mode]["bits_by_position"] == [round(math.log2(v), 4)] * 10


def _own_bits(model: ImplicitSSM, ids: np.ndarray, mode: str = "simultaneous") -> float:
    """Bits per character of next-character prediction, scored with the test's own shift."""
    x = torch.from_numpy(ids[None, :-1])
    with torch.no_grad():
        logp = torch.log_softmax(model(x, mode=mode).logits.double(), -1)[0]
    return float(-logp[torch.arange(len(ids) - 1), torch.from_numpy(ids[1:])].mean() / math.log(2))


def test_a_periodic_text_is_learned_with_the_next_character_as_target() -> None:
    corpus = make_corpus("abcdefg" * 300, min_count=1)
    r = language.LanguageRecipe(name="periodic", implicit=False, steps=60, lr=2e-2, **TINY)
    model, _ = language.train(r, corpus=corpus, progress=False)
    heldout = corpus.vocabulary.encode(corpus.text[corpus.split:][:40])
    assert _own_bits(model, heldout) < 0.1  # log2(8) = 3 bits untrained


def test_language_training_is_reproducible_bitwise(tmp_path: Path) -> None:
    corpus = make_corpus("a rose is a rose is a rose. " * 40, min_count=1)
    r = language.LanguageRecipe(name="twice", implicit=True, steps=6, tied_fraction=0.5, deq_iters=3,
                                phantom_steps=2, jac_reg=0.1, **TINY)
    first, _ = language.train(r, corpus=corpus, progress=False, run_dir=tmp_path / "run")
    second, _ = language.train(r, corpus=corpus, progress=False)
    assert first.state_dict().keys() == second.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), second.state_dict().values()))
    other, _ = language.train(dataclasses.replace(r, seed=1), corpus=corpus, progress=False)
    assert not torch.equal(first.head.weight, other.head.weight)
    assert (tmp_path / "run" / "metrics.jsonl").read_text().count("\n") == 2  # steps 0 and 5


def test_charlm_baselines_share_the_budget_and_explicit1_the_parameter_count() -> None:
    implicit = dataclasses.asdict(LANGUAGE["charlm-implicit"])
    own = {"name", "implicit", "n_layers", "jac_reg"}
    vocab = pydoc_corpus().vocabulary.size
    count = sum(p.numel() for p in ImplicitSSM(LANGUAGE["charlm-implicit"].config(vocab)).parameters())
    for name, layers in (("charlm-explicit1", 1), ("charlm-explicit2", 2)):
        r = LANGUAGE[name]
        assert {k: v for k, v in dataclasses.asdict(r).items() if k not in own} == \
            {k: v for k, v in implicit.items() if k not in own}
        assert r.n_layers == layers and not r.implicit
    assert sum(p.numel() for p in ImplicitSSM(LANGUAGE["charlm-explicit1"].config(vocab)).parameters()) == count


def test_charlm_mamba2_has_the_implicit_budget_and_about_its_parameter_count() -> None:
    """The plain Mamba2 baseline (issue 42): charlm-implicit's budget, its own width and depth, and a
    parameter count within 1 % of the implicit model's (60,649 against 61,038)."""
    implicit, r = LANGUAGE["charlm-implicit"], LANGUAGE["charlm-mamba2"]
    own = {"name", "implicit", "kind", "n_layers", "d_model", "jac_reg"}
    assert {k: v for k, v in dataclasses.asdict(r).items() if k not in own} == \
        {k: v for k, v in dataclasses.asdict(implicit).items() if k not in own}
    vocab = pydoc_corpus().vocabulary.size
    model = new_model(r, vocab)
    count = sum(p.numel() for p in ImplicitSSM(implicit.config(vocab)).parameters())
    assert isinstance(model, Mamba2LM) and r.kind == "mamba2" and not r.implicit
    assert sum(p.numel() for p in model.parameters()) == 60_649 and abs(60_649 - count) / count < 0.01
    with pytest.raises(InputError, match=r"^recipe 'x': kind = 'mamba2'; expected 'implicit_ssm', or 'mamba2' with"):
        language.LanguageRecipe(name="x", implicit=True, kind="mamba2")


def test_a_mamba2_language_model_trains_saves_evaluates_and_generates(tmp_path: Path) -> None:
    corpus = make_corpus("abcdefg" * 300, min_count=1)
    r = language.LanguageRecipe(name="m2", implicit=False, kind="mamba2", steps=60, lr=2e-2, **TINY)
    model = load_model(language.run_recipe(r, tmp_path / "m2", progress=False, corpus=corpus))
    assert isinstance(model, Mamba2LM) and model.card["kind"] == "mamba2"
    assert language.card_recipe(model) == r
    heldout = model.card["metrics"]["heldout"]
    assert list(heldout) == ["length", "windows", "characters", "simultaneous"]  # one pass, evaluated once
    assert heldout["simultaneous"]["bits_per_character"] < 0.1  # log2(8) = 3 bits untrained
    out = run("--threads", "1", "evaluate", str(tmp_path / "m2"))
    assert out.exit_code == 0 and "explicit, 1 layer(s)" in out.output and "one pass" in out.output, out.output
    assert generate(model, "abc", 11, temperature=0).text == "defgabcdefg"


def test_card_lists_vocabulary_split_and_heldout_bits(tiny_dir: Path) -> None:
    model = load_model(tiny_dir)
    card = model.card
    assert card["task"] == "language" and card["vocabulary"] == " .acehst" and card["unknown_id"] == 8
    assert card["data"]["split"].startswith("first 90 %") and card["data"]["split_index"] == 702
    heldout = card["metrics"]["heldout"]
    assert len(heldout["simultaneous"]["bits_by_position"]) == heldout["length"] == 16
    assert "sequential" not in heldout  # an explicit model: one pass, evaluated once
    assert language.card_recipe(model).eval_length == 16


def _tiny_implicit() -> ImplicitSSM:
    model = ImplicitSSM(SSMConfig(vocab_size=6, d_model=8, d_state=4, head_dim=8),
                        generator=torch.Generator().manual_seed(2)).eval()
    model.card = {"name": "gen", "kind": "implicit_ssm", "task": "language", "vocabulary": "abcde", "unknown_id": 5,
                  "training": {"tau": 0.8, "eval_tol": 1e-5, "eval_max_iter": 100}}
    return model


def test_generate_is_reproducible_from_its_seed() -> None:
    model = _tiny_implicit()
    first = generate(model, "abé", 16, seed=3)
    assert first.text == generate(model, "abé", 16, seed=3).text and len(first.text) == 16
    assert first.text != generate(model, "abé", 16, seed=4).text
    assert first.unknown == ["é"] and first.iterations_per_token > 1
    with pytest.raises(InputError, match=r"^length = 0; expected an integer >= 1$"):
        generate(model, "ab", 0)
    with pytest.raises(InputError, match=r"^temperature = -1"):
        generate(model, "ab", 3, temperature=-1)


def test_exact_next_logits_is_the_sequential_mode_and_greedy_takes_the_argmax() -> None:
    model = _tiny_implicit()
    step = ExactNextLogits(model, tau=0.8, tol=1e-7, max_iter=300)
    tokens = torch.tensor([0, 3, 1, 4, 4, 2])
    for cut in (1, 2, 3, 6, 4):  # growing prefixes, then a shorter one (starts over)
        with torch.no_grad():
            whole = model(tokens[None, :cut], mode="sequential", tol=1e-7, max_iter=300).logits[0, -1]
        assert torch.allclose(step(tokens[:cut]), whole, atol=1e-5)
    greedy = generate(model, "ab", 8, temperature=0)
    ids = torch.tensor([0, 1] + [model.card["vocabulary"].index(c) for c in greedy.text])
    with torch.no_grad():
        expected = model(ids[None, :-1], mode="sequential", tol=1e-5, max_iter=100).logits[0, 1:].argmax(-1)
    assert torch.equal(ids[2:], expected)


def test_generate_cli_errors_are_one_line(tiny_dir: Path) -> None:
    for args, message in ((["nope", "--prompt", "x"], "Error: unknown model (neither a bundled name nor a directory)"),
                          ([str(tiny_dir), "--prompt", "the", "--length", "0"], "Error: length = 0; expected"),
                          ([str(tiny_dir), "--prompt", "the", "--length", "-3"], "Error: length = -3; expected"),
                          (["digits-deq48", "--prompt", "x"],
                           "Error: model digits-deq48 has kind 'deq' and task 'digits'; expected a language model")):
        out = run("generate", *args)
        assert out.exit_code == 1 and len(out.output.strip().splitlines()) == 1, out.output
        assert out.output.startswith(message), out.output


def test_generate_cli_notes_unknown_characters_and_repeats_with_a_seed(tiny_dir: Path) -> None:
    runner = CliRunner()
    args = ["--threads", "1", "generate", str(tiny_dir), "--prompt", "the dog", "--length", "12", "--seed", "5"]
    out = runner.invoke(main, args)
    assert out.exit_code == 0, out.output
    assert "note: prompt character(s) 'd', 'o', 'g' are not in the vocabulary of tiny-lm; they map to unknown_id 8" \
        in out.stderr
    text = out.stdout.rstrip("\n")
    assert text.startswith("the dog") and len(text) == len("the dog") + 12
    assert runner.invoke(main, args).stdout == out.stdout


def test_generate_cli_temperature_changes_the_text_and_zero_is_greedy(tiny_dir: Path) -> None:
    """Guards against `aocsim generate` ignoring --temperature (issue 41, finding 9a): the same seed at
    another temperature draws another text, the same temperature and seed repeat it, and temperature 0
    takes the most likely character each time, whatever the seed."""
    runner = CliRunner()

    def text(temperature: str, seed: str) -> str:
        out = runner.invoke(main, ["--threads", "1", "generate", str(tiny_dir), "--prompt", "the ", "--length", "24",
                                   "--seed", seed, "--temperature", temperature])
        assert out.exit_code == 0, out.output
        return out.stdout

    hot = text("50", "1")
    assert hot == text("50", "1")
    assert hot != text("0.05", "1")
    greedy = text("0", "1")
    assert greedy == text("0", "2") == text("0", "3")
    assert hot != greedy and text("50", "2") != text("50", "1")


def test_evaluate_and_models_table_show_bits_per_character(tiny_dir: Path) -> None:
    out = run("--threads", "1", "evaluate", str(tiny_dir))
    assert out.exit_code == 0, out.output
    assert "bits/char" in out.output and "129-256" not in out.output and "2-4" in out.output
    bad = run("evaluate", str(tiny_dir), "--factors", "1,4")
    assert bad.exit_code == 1 and "--factors applies to state-tracking models; tiny-lm is a language model" in bad.output
    table = run("models", "table", str(tiny_dir.parent))
    assert table.exit_code == 0 and "bpc simultaneous" in table.output and "tiny-lm" in table.output


@pytest.mark.skipif("charlm-implicit" not in bundled_models(), reason="the bundled language models are not trained")
def test_bundled_implicit_model_modes_agree_and_it_beats_its_explicit_baseline() -> None:
    model = load_model("charlm-implicit")
    r = language.card_recipe(model)
    inputs, targets = pydoc_corpus().heldout_windows(64)
    out = evaluate_bits(model, r, inputs[:4, :48], targets[:4, :48])
    assert abs(out["mode_bits_gap"]) < 1e-3 and out["mode_agreement"] > 0.99
    cards = {name: load_model(name).card["metrics"]["heldout"] for name in ("charlm-implicit", "charlm-explicit1")}
    assert cards["charlm-implicit"]["sequential"]["bits_per_character"] < \
        cards["charlm-explicit1"]["simultaneous"]["bits_per_character"]
