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
    train_len = min(e["length"] for e in metrics.values())
    ax.axvline(train_len, color="grey", lw=0.8, ls=":", label="training length")
    ax.set_xlabel("position t")
    ax.set_ylabel("per-token accuracy")
    ax.set_ylim(0, 1.02)
    ax.set_title(title)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
