"""Language models' results: held-out bits per character (`evaluate_language`, what `aocsim evaluate`
reports for a `charlm-*` model) and the bits-by-position plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn


def evaluate_language(model: nn.Module, *, progress: bool = False, workers: int = 1) -> dict[str, Any]:
    """Held-out bits per character of a language model (a `charlm-*` card), overall and by position.

    The held-out split of the pydoc corpus (aocsim/tasks/corpus.py) as consecutive windows of the
    card's eval_length, encoded with the card's vocabulary; implicit models in simultaneous and
    sequential mode (`aocsim.train.evaluation.evaluate_bits`). `same_corpus` says whether this
    Python's corpus text is the one the card was trained and evaluated on (SHA-256); the text
    changes between Python releases.
    """
    from aocsim.tasks.corpus import pydoc_corpus
    from aocsim.train.evaluation import evaluate_bits
    from aocsim.train.language import card_recipe, card_vocabulary

    vocab, recipe = card_vocabulary(model), card_recipe(model)
    corpus = pydoc_corpus()
    inputs, targets = corpus.heldout_windows(recipe.eval_length, vocab)
    heldout = evaluate_bits(model, recipe, inputs, targets, workers=workers, progress=progress,
                            desc=f"{model.card['name']} held out")
    fingerprint = corpus.fingerprint()
    recorded = model.card.get("data", {}).get("corpus", {}).get("sha256")
    return {"task": "language", "implicit": recipe.implicit, "train_length": recipe.train_length,
            "corpus": fingerprint, "same_corpus": recorded == fingerprint["sha256"], "heldout": heldout}



def position_buckets(length: int) -> list[tuple[int, int]]:
    """Ranges of characters seen, (first, last) inclusive, for a summary of bits by position:
    1, 2-4, 5-16, 17-64, then doubling (65-128, 129-256, ...), up to `length`."""
    out, first, last = [], 1, 1
    while first <= length:
        out.append((first, min(last, length)))
        first, last = last + 1, 4 * last if last < 64 else 2 * last
    return out


def bucket_means(bits_by_position: list[float]) -> list[float]:
    """Mean bits per character over each of `position_buckets` (position t has seen t + 1 characters)."""
    return [sum(bits_by_position[a - 1: b]) / (b - a + 1) for a, b in position_buckets(len(bits_by_position))]


def plot_bits_by_position(results: dict[str, list[float]], path: Path, *, train_length: int | None = None,
                          title: str = "") -> Path:
    """Bits per character against the characters seen (log axis), one line per label (model, mode).

    Args:
        results: label -> bits by position (`evaluate_bits`' bits_by_position).
        path: output file (.png, .svg or .pdf; aocsim.io.outputs.check_output_file checks it).
        train_length: marked on the axis (the training windows' length).
    """
    from aocsim.experiments.plots import plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for label, bits in results.items():
        ax.plot(range(1, len(bits) + 1), bits, lw=1.2, label=label)
    if train_length:
        ax.axvline(train_length, color="grey", lw=0.8, ls=":", label="training length")
    ax.set_xscale("log")
    ax.set_xlabel("characters seen (position t + 1, log scale)")
    ax.set_ylabel("bits per character (held out)")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
