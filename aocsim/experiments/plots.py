"""Plots (PNG / SVG via matplotlib's Agg backend; nothing is shown on screen)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot_accuracy_by_position(metrics: dict[str, Any], path: Path, *, title: str = "") -> Path:
    """Per-token accuracy against position, one line per evaluated length and mode.

    Args:
        metrics: `evaluate_lengths` output ({"1L": {"length": L, mode: {"accuracy_by_position": [...]}}}).
        path: output file (.png, .svg or .pdf; aocsim.io.outputs.check_output_file checks it).
    """
    fig, ax = plt.subplots(figsize=(7, 4))
    styles = {"simultaneous": "-", "sequential": "--"}
    for key, entry in metrics.items():
        for mode, style in styles.items():
            if mode in entry:
                acc = entry[mode]["accuracy_by_position"]
                ax.plot(range(1, len(acc) + 1), acc, style, label=f"{key} (L = {entry['length']}), {mode}")
    return _finish(fig, ax, path, min(e["length"] for e in metrics.values()), title, "position t")


def plot_accuracy_comparison(results: dict[str, dict[str, Any]], path: Path, *, mode: str = "sequential",
                             title: str = "", train_length: int | None = None) -> Path:
    """Per-token accuracy against position on a log-scale position axis, one line per model.

    Each model's longest evaluated length is drawn (its positions include the shorter lengths'),
    so implicit and explicit models evaluated on the same sequences can be compared position by
    position.

    Args:
        results: label -> `evaluate_lengths` output of that model.
        path: output file (.png, .svg or .pdf; aocsim.io.outputs.check_output_file checks it).
        mode: "simultaneous" or "sequential".
        train_length: marks the training length (default: the shortest evaluated length).
    """
    from aocsim.errors import InputError

    if not results:
        raise InputError("plot_accuracy_comparison: results is empty; expected at least one model")
    fig, ax = plt.subplots(figsize=(7, 4))
    shortest = []
    for label, metrics in results.items():
        longest = max(metrics.values(), key=lambda e: e["length"])
        if mode not in longest:
            raise InputError(f"plot_accuracy_comparison: no {mode!r} results for {label!r}; "
                             f"evaluated modes: {[m for m in longest if isinstance(longest[m], dict)]}")
        acc = longest[mode]["accuracy_by_position"]
        ax.plot(range(1, len(acc) + 1), acc, lw=1.2, label=f"{label} ({mode})")
        shortest.append(min(e["length"] for e in metrics.values()))
    ax.set_xscale("log")
    return _finish(fig, ax, path, train_length or min(shortest), title, "position t (log scale)")


def _finish(fig: Any, ax: Any, path: Path, train_length: int, title: str, xlabel: str) -> Path:
    """The accuracy-against-position axes' common dressing (training length, labels, legend), saved."""
    ax.axvline(train_length, color="grey", lw=0.8, ls=":", label="training length")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("per-token accuracy")
    ax.set_ylim(0, 1.02)
    ax.set_title(title)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_compare(results: dict[str, Any], path: Path) -> Path:
    """`aocsim.compare` results, one row of panels per figure kind, models side by side.

    Left: accuracy (or, without targets, agreement; a regression's mean squared error, on an axis of its own
    when the figure has classifiers too) of the exact path and of the device, the device
    as the mean over chips x seeds with the range of the runs. Middle: the distribution of the
    fixed-point error ||z_device - z_exact|| / ||z_exact|| over every sample (and token), log axis.
    Right (models with `residual_trace`): convergence, the residual per iteration, median and the
    10-90 % band over samples and runs, a stopped sample held at its last residual.

    Args:
        results: model name -> `compare` Dataset.
        path: output file (.png, .svg or .pdf).
    """
    import numpy as np

    traced = {name: ds for name, ds in results.items() if "residual_trace" in ds}
    fig, axes = plt.subplots(1, 3 if traced else 2, figsize=(15 if traced else 10, 3.8))
    acc_ax, fpe_ax = axes[0], axes[1]
    scores = {name: _scores(ds) for name, ds in results.items()}
    shares = {what for _, _, what in scores.values() if what not in VALUES}
    values = sorted({what for _, _, what in scores.values() if what in VALUES})
    mse_ax = None
    if values:  # regressions' errors, language models' bits: an axis of their own
        mse_ax = acc_ax.twinx() if shares else acc_ax
        mse_ax.set_ylabel(" / ".join(values))
    for i, (name, ds) in enumerate(results.items()):
        exact, runs, what = scores[name]
        ax = mse_ax if what in VALUES else acc_ax
        ax.bar(i - 0.2, exact, width=0.4, color="tab:blue", label="exact" if i == 0 else None)
        spread = np.clip([[runs.mean() - runs.min()], [runs.max() - runs.mean()]], 0, None)  # rounding: >= 0
        ax.bar(i + 0.2, runs.mean(), width=0.4, color="tab:orange", label="device" if i == 0 else None,
               yerr=spread, capsize=3)
        label = f"{runs.mean():.3g}" if ax is mse_ax else f"{100 * runs.mean():.1f}"
        ax.text(i + 0.2, runs.mean() if ax is mse_ax else min(runs.mean(), 0.95), label, ha="center", va="top",
                fontsize=7)
        err = ds.fixed_point_error.values.ravel()
        err = err[np.isfinite(err) & (err > 0)]
        if err.size:
            bins = np.logspace(np.log10(err.min()), np.log10(err.max()) + 1e-9, 40)
            fpe_ax.hist(err, bins=bins, histtype="step", lw=1.2, label=name)
    acc_ax.set_xticks(range(len(results)), list(results), fontsize=8)
    if mse_ax is not None:
        mse_ax.set_ylim(bottom=0)
    if shares:
        from matplotlib.ticker import PercentFormatter

        acc_ax.set_ylim(0, 1.0)  # accuracy within 0-100 %
        acc_ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
        acc_ax.set_ylabel(" / ".join(sorted(shares)) + " (%)")
    acc_ax.legend(fontsize=7, loc="lower right")
    device = next(iter(results.values())).attrs.get("device", "")
    acc_ax.set_title(f"exact path vs {device} (device: mean, range over chips x seeds)", fontsize=9)
    fpe_ax.set_xscale("log")
    fpe_ax.set_xlabel("fixed-point error ||z_device - z_exact|| / ||z_exact||")
    fpe_ax.set_ylabel("samples (tokens)")
    fpe_ax.legend(fontsize=7)
    if traced:
        _convergence(axes[2], traced)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


VALUES = ("mean squared error", "bits per character")  # headlines that are not fractions


def _scores(ds: Any) -> tuple[float, Any, str]:
    """(exact, device per run, what) of a compare Dataset's headline: a language model's bits per character,
    accuracy, agreement without targets, or a regression's mean squared error."""
    from aocsim.experiments.metrics import METRICS

    per_run = [d for d in ("sample", "position") if d in ds.dims]
    for device, what in (("bits_per_character", "bits per character"), ("accuracy", "accuracy"),
                         ("mse", "mean squared error")):
        if METRICS[device].available(ds) and (device != "bits_per_character" or ds.attrs.get("task") == "language"):
            exact = METRICS[f"exact_{device}"].reduce(ds, per_run).isel(chip=0, seed=0)
            return float(exact), METRICS[device].reduce(ds, per_run).values.ravel(), what
    if "agreement" in ds:
        return 1.0, ds.agreement.mean(per_run).values.ravel(), "agreement"
    rms = ((ds.output_error ** 2).mean(per_run) ** 0.5).values.ravel()  # a regression without targets
    return float("nan"), rms ** 2, "mean squared error"


def _convergence(ax: Any, results: dict[str, Any]) -> None:
    """Residual against iteration per model and path: median line, 10-90 % band. A DEQ's residual is
    absolute (model units or volts), a sequence model's relative per token (the trace's `kind`)."""
    import numpy as np

    from aocsim.execute.hybrid import hold_last

    positive = False  # one-pass models have residual 0 at every token: no log axis for them alone
    for i, (name, ds) in enumerate(results.items()):
        color = f"C{i}"
        kind = ds.residual_trace.attrs.get("kind") or ("relative" if str(ds.residual_trace.attrs.get(
            "units", "")).startswith("relative") else "absolute")  # a file written before `kind` was kept
        for path, style in (("exact", "--"), ("device", "-")):
            trace = ds.residual_trace.sel(path=path)
            flat = hold_last(trace.stack(run=[d for d in trace.dims if d != "iteration"])
                              .transpose("iteration", "run").values)
            keep = ~np.all(np.isnan(flat), axis=1)
            its = np.arange(flat.shape[0])[keep]
            low, mid, high = (np.nanquantile(flat[keep], q, axis=1) for q in (0.1, 0.5, 0.9))
            ax.plot(its, mid, style, color=color, lw=1.2, label=f"{name} ({kind}), {path}")
            positive |= bool(np.any(high > 0))
            if path == "device":
                ax.fill_between(its, low, high, color=color, alpha=0.2, lw=0)
    ax.set_yscale("log" if positive else "linear")
    ax.set_xlabel("iteration")
    kinds = {ds.residual_trace.attrs.get("kind") for ds in results.values()}
    ax.set_ylabel({frozenset({"relative"}): "relative residual ||f(z) - z|| / ||f(z)||",
                   frozenset({"absolute"}): "residual ||f(z) - z||"}.get(
        frozenset(kinds), "residual ||f(z) - z||: absolute, or relative / ||f(z)||"))
    ax.set_title("convergence: median, 10-90 % band (device)", fontsize=9)
    ax.legend(fontsize=7)
