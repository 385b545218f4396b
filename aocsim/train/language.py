"""Recipes for character-level language modelling: implicit and explicit Mamba2-style models, and the
plain Mamba2 LM (kind "mamba2", aocsim/nn/mamba2_lm.py), on the English text of CPython's `pydoc_data.topics` (aocsim/tasks/corpus.py; docs/LANGUAGE.md).

Next-character prediction: position t of a window predicts character t + 1 (`corpus.next_character_pairs`;
unlike the state-tracking targets, which are predicted at their own position). Every step draws
`batch_size` random windows of `train_length` + 1 characters from the training split (numpy
default_rng(seed)) and trains by the shared loop (aocsim/train/loop.py: for an implicit model the
weight-tied warm-up, then fixed-point iterations and phantom-gradient steps). The card records the
vocabulary, its unknown id, the split and the held-out bits per character, overall and by position,
on consecutive held-out windows of `eval_length` characters in both modes (`evaluate_bits`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from aocsim.errors import InputError, ModelFileError
from aocsim.io.model_files import save_model, software_versions
from aocsim.nn.implicit_ssm import ImplicitSSM
from aocsim.nn.mamba2_lm import Mamba2LM
from aocsim.tasks import corpus as _corpus
from aocsim.tasks.corpus import Corpus, Vocabulary
from aocsim.train.evaluation import evaluate_bits
from aocsim.train.loop import Batch, TrainingRecipe, fit, new_model

TASK = "language"


@dataclass(frozen=True, kw_only=True)
class LanguageRecipe(TrainingRecipe):
    """Every setting of a character-level training run (recorded in the model card); the shared ones
    are `TrainingRecipe`'s."""

    train_length: int = 128  # positions per training window (characters predicted)
    eval_length: int = 256  # positions per held-out window in the card's evaluation
    revision: int = 1

    def checks(self) -> dict[str, tuple[bool, str]]:
        return {**super().checks(), "train_length": (self.train_length >= 1, "an integer >= 1"),
                "eval_length": (self.eval_length >= 1, "an integer >= 1")}


def train(r: LanguageRecipe, *, corpus: Corpus | None = None, progress: bool = True,
          run_dir: Path | None = None) -> tuple[ImplicitSSM | Mamba2LM, dict]:
    """Train by recipe `r` on `corpus` (default: the pydoc corpus); returns the model and its log summary."""
    corpus = corpus or _corpus.pydoc_corpus()
    model = new_model(r, corpus.vocabulary.size)
    rng = np.random.default_rng(r.seed)

    def next_batch(step: int) -> Batch:
        inputs, targets = corpus.sample(rng, r.batch_size, r.train_length)
        return inputs, targets, {}

    return model, fit(model, r, next_batch, progress=progress, run_dir=run_dir)


def evaluate_heldout(model: ImplicitSSM | Mamba2LM, r: LanguageRecipe, corpus: Corpus, *, workers: int = 1,
                     progress: bool = False) -> dict[str, Any]:
    """Held-out bits per character (`evaluate_bits`) on the corpus's held-out windows of r.eval_length."""
    inputs, targets = corpus.heldout_windows(r.eval_length)
    return evaluate_bits(model, r, inputs, targets, workers=workers, progress=progress, desc=f"{r.name} held out")


def card_vocabulary(model: nn.Module) -> Vocabulary:
    """The vocabulary in a language model's card, or a one-line error saying what the model is."""
    card = getattr(model, "card", {})
    if card.get("task") != TASK:
        raise InputError(f"model {card.get('name', '?')} has kind {card.get('kind', '?')!r} and task "
                         f"{card.get('task')!r}; expected a language model (task {TASK!r})")
    vocab = Vocabulary(card.get("vocabulary", ""))
    if vocab.size != model.config.vocab_size or card.get("unknown_id") != vocab.unknown_id:
        raise ModelFileError(f"model {card['name']}: vocabulary of {len(vocab.chars)} characters with unknown_id "
                             f"{card.get('unknown_id')!r} does not fit its {model.config.vocab_size} classes")
    return vocab


def card_recipe(model: nn.Module) -> LanguageRecipe:
    """The training recipe recorded in a language model's card."""
    card_vocabulary(model)
    training = model.card["training"]
    return LanguageRecipe(**{f.name: training[f.name] for f in fields(LanguageRecipe) if f.name in training})


def model_card(r: LanguageRecipe, model: ImplicitSSM | Mamba2LM, summary: dict, metrics: dict, corpus: Corpus) -> dict[str, Any]:
    vocab, heldout = corpus.vocabulary, corpus.text[corpus.split:]
    n_params = sum(p.numel() for p in model.parameters())
    what = ("plain Mamba2 language model (tied head)" if r.kind == "mamba2" else
            f"{'implicit' if r.implicit else 'explicit'} Mamba2-style model")
    return {
        "name": r.name,
        "kind": r.kind,
        "task": TASK,
        "description": f"{what}, {r.n_layers} layer(s), {n_params} parameters; next-character prediction on "
                       f"{corpus.source}.",
        "vocabulary": vocab.chars,
        "unknown_id": vocab.unknown_id,
        "config": model.config.to_dict(),
        "training": {**asdict(r), **summary},
        "data": {"corpus": corpus.fingerprint(), "split": _corpus.SPLIT, "split_index": corpus.split,
                 "train_characters": corpus.split, "heldout_characters": len(heldout),
                 "vocabulary_rule": f"characters occurring at least {_corpus.MIN_COUNT} times in the training "
                                    "split, code-point order; every other character is unknown_id",
                 "heldout_unknown_characters": sum(c not in vocab.chars for c in heldout),
                 "windows": f"random windows of train_length + 1 = {r.train_length + 1} characters of the training "
                            "split every step (numpy default_rng(seed)); position t predicts character t + 1"},
        "metrics": {"heldout": metrics},
        "parameters": n_params,
        "seed": r.seed,
        "software": software_versions(),
    }


def run_recipe(recipe: LanguageRecipe, out_dir: Path, *, overwrite: bool = False, progress: bool = True,
               run_dir: Path | None = None, corpus: Corpus | None = None, **overrides: Any) -> Path:
    """Train, evaluate on the held-out split in both modes, and write the model directory."""
    r = replace(recipe, **overrides)
    if out_dir.exists() and not overwrite:  # fail before spending minutes on training
        raise ModelFileError(f"{out_dir} exists; refusing to overwrite it (pass overwrite=True / --force)")
    corpus = corpus or _corpus.pydoc_corpus()
    model, summary = train(r, corpus=corpus, progress=progress, run_dir=run_dir)
    metrics = evaluate_heldout(model, r, corpus)
    return save_model(model, out_dir, model_card(r, model, summary, metrics, corpus), overwrite=overwrite)
