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


SNR = "placement.snr_db"
SITE = "placement.snr_site"


def plot_bits_against_snr(ds: Any, path: Path, *, lines: tuple[str, ...] = ("model", "placement.snr_kind"),
                          title: str = "") -> Path:
    """What noise set by an SNR costs a language model: the device path's bits per character above its
    exact path's (log axis above 0.01 bits, linear through 0) against the SNR in dB, from a sweep with `bits_per_character` and
    `exact_bits_per_character` over a `placement.snr_db` axis (docs/LANGUAGE.md, the SNR study). One
    panel per `placement.snr_site` (when swept); one line per combination of the `lines` dimensions
    (colour by the first, dash by the second), mean over chips and seeds. The noiseless point (inf dB)
    is left out: it is the exact path, up to the device's stop rule.

    Args:
        ds: the sweep's results (`aocsim.experiments.sweep.plots.open_results`).
        path: output file (.png, .svg or .pdf).
        lines: the dimensions whose values make a line each; every other one but the site and the
            SNR must have one value.
    """
    import itertools

    import numpy as np

    from aocsim.errors import InputError
    from aocsim.experiments.plots import plt

    for needed in ("bits_per_character", "exact_bits_per_character", SNR):
        if needed not in ds.variables:
            raise InputError(f"the results have no {needed!r}; expected a language-model sweep over {SNR} with the "
                             "bits_per_character and exact_bits_per_character metrics")
    dims = ds.bits_per_character.dims
    if SNR in lines or SITE in lines:
        raise InputError(f"lines = {list(lines)}; the SNR is the x axis and the site the panels, so expected other "
                         "dimensions (model, placement.snr_kind, placement.ema_alpha, ...)")
    if SNR not in dims:
        raise InputError(f"{SNR} is not a dimension of the results (zipped or random axes?); expected a grid axis")
    others = [d for d in dims if d not in (*lines, SNR, SITE, "chip", "seed") and ds.sizes[d] > 1]
    if others:
        raise InputError(f"{others[0]} has {ds.sizes[others[0]]} values; expected it among lines {list(lines)} or one value")
    excess = (ds.bits_per_character - ds.exact_bits_per_character).mean([d for d in ("chip", "seed") if d in dims])
    excess = excess.where(np.isfinite(ds[SNR]), drop=True)
    sites = [str(v) for v in ds[SITE].values] if SITE in dims else [None]
    present = [d for d in lines if d in dims]
    fig, panels = plt.subplots(1, len(sites), figsize=(5.5 * len(sites), 4.2), squeeze=False, sharey=True)
    for ax, where in zip(panels[0], sites):
        one = excess if where is None else excess.sel({SITE: where})
        for combo in itertools.product(*[list(ds[d].values) for d in present]):
            line = one.sel(dict(zip(present, combo)))
            line = line.mean([d for d in line.dims if d != SNR]).sortby(SNR)
            colour = list(ds[present[0]].values).index(combo[0]) if present else 0
            dash = ["-", "--", "-.", ":"][list(ds[present[1]].values).index(combo[1]) % 4] if len(present) > 1 else "-"
            words = [str(c) if d == "model" else f"{d.split('.')[-1]} {c}" for d, c in zip(present, combo)]
            ax.plot(line[SNR].values, line.values, marker="o", ms=3, ls=dash, color=f"C{colour}",
                    label=", ".join(words) or "device path")
        ax.set_yscale("symlog", linthresh=0.01)  # log above 0.01 bits; linear through 0 (the exact path)
        ax.axhline(0.0, color="black", lw=0.6)
        ax.set_xlabel("SNR of the noise, dB")
        ax.set_title(f"noise on the {where}" if where else title, fontsize=10)
        ax.grid(alpha=0.3, which="both")
    panels[0][0].set_ylabel("bits per character above the exact path\n(log above 0.01, linear below)")
    panels[0][-1].legend(fontsize=7)
    if title and sites[0] is not None:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


STATES_SNR = "placement.snr_states_db"


def snr_grid(ds: Any, metric: str = "accuracy", panels: tuple[str, ...] = ("placement.snr_kind",
                                                                          "placement.ema_alpha")) -> Any:
    """`metric` over the reference grid (input noise `placement.snr_db` x state noise `placement.snr_states_db`,
    and the `panels` dimensions), the mean over chips and seeds; any other dimension with more than one
    value is refused (it would be averaged silently)."""
    from aocsim.errors import InputError

    for needed in (metric, SNR, STATES_SNR):
        if needed not in ds.variables:
            raise InputError(f"the results have no {needed!r}; expected a sweep over {SNR} and {STATES_SNR} with "
                             f"the {metric} metric")
    values = ds[metric].mean([d for d in ("chip", "seed") if d in ds[metric].dims])
    others = [d for d in values.dims if d not in (*panels, SNR, STATES_SNR) and values.sizes[d] > 1]
    if others:
        raise InputError(f"{others[0]} has {values.sizes[others[0]]} values; expected it among panels "
                         f"{list(panels)} or one value")
    return values


def plot_snr_heat_maps(ds: Any, path: Path, *, metric: str = "accuracy", panels: tuple[str, str] = (
        "placement.snr_kind", "placement.ema_alpha"), mark: tuple[float, float, str] | None = None,
        title: str = "") -> Path:
    """The implicit-LM paper's noise figure: `metric` (next-token accuracy by default) of the device path as
    a heat map over input noise (x, `placement.snr_db`) and state noise (y, `placement.snr_states_db`), one
    panel per combination of the two `panels` dimensions (rows, columns; a dimension the results lack, or
    'model', is allowed), mean over chips and seeds, each cell's value printed; `mark` = (input dB, state
    dB, words) rings a point (aoc48's own noise at its mapped dB). From a sweep like
    notebooks/sweeps/charlm-snr-reference.yaml (docs/LANGUAGE.md, "The reference grid")."""
    import numpy as np

    from aocsim.experiments.plots import plt

    values = snr_grid(ds, metric, panels)
    rows, cols = ([list(ds[d].values) if d in values.dims else [None] for d in panels])
    scale = 100.0 if metric in ("accuracy", "exact_accuracy", "agreement") else 1.0
    fig, axes = plt.subplots(len(rows), len(cols), figsize=(3.2 * len(cols) + 1.2, 2.9 * len(rows) + 0.6),
                             squeeze=False, constrained_layout=True)
    x_db, y_db = [float(v) for v in ds[SNR].values], [float(v) for v in ds[STATES_SNR].values]
    for (i, r), (j, c) in ((ir, jc) for ir in enumerate(rows) for jc in enumerate(cols)):
        ax, cell = axes[i][j], values
        for dim, v in zip(panels, (r, c)):
            cell = cell.sel({dim: v}) if v is not None else cell
        cell = cell.squeeze(drop=True).transpose(STATES_SNR, SNR) * scale
        image = ax.imshow(cell.values, origin="lower", cmap="viridis", aspect="auto",
                          vmin=0 if scale == 100 else None, vmax=100 if scale == 100 else None)
        for (a, b), v in np.ndenumerate(cell.values):
            ax.text(b, a, "-" if not np.isfinite(v) else f"{v:.0f}" if scale == 100 else f"{v:.2f}",
                    ha="center", va="center", fontsize=7, color="white" if scale == 100 and v < 60 else "black")
        ax.set_xticks(range(len(x_db)), [f"{v:g}" for v in x_db])
        ax.set_yticks(range(len(y_db)), [f"{v:g}" for v in y_db])
        if i == len(rows) - 1:
            ax.set_xlabel("input noise, SNR dB")
        if j == 0:
            ax.set_ylabel("state noise, SNR dB")
        words = [str(v) if d == "model" else f"{d.split('.')[-1].replace('snr_', '')} {v:g}" if isinstance(v, float)
                 else f"{d.split('.')[-1].replace('snr_', '')} {v}" for d, v in zip(panels, (r, c)) if v is not None]
        ax.set_title(", ".join(words), fontsize=9)
        if mark is not None:  # fractional cell positions: interpolate between the grid's dB values
            mx, my = np.interp(mark[0], x_db, range(len(x_db))), np.interp(mark[1], y_db, range(len(y_db)))
            ax.plot(mx, my, marker="o", ms=14, mfc="none", mec="red", mew=1.5, ls="none", label=mark[2])
    if mark is not None:
        axes[0][-1].legend(fontsize=7, loc="lower right", framealpha=0.9)
    label = "next-token accuracy, %" if metric == "accuracy" else metric.replace("_", " ")
    fig.colorbar(image, ax=axes, shrink=0.8, label=label)
    if title:
        fig.suptitle(title, fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
