"""Bits per character by position under the implicit-LM paper's noise (docs/LANGUAGE.md, "The reference grid"):
what the noise adds to each model's noiseless device path, by characters seen (position buckets 1, 2-4, 5-16,
17-64, 65-128; per position the curves follow the 16 windows' own text).

The language models on the abstract noise model (no map on tiles) in the reference code's conventions
(`snr_convention: elementwise`, additive), at three points of the grid of
notebooks/sweeps/charlm-snr-reference.yaml: no noise, input noise at 20 dB with state noise at 30 dB,
and 10 dB with 20 dB; the implicit model with the EMA readout at alpha 0.1. The same 16 held-out
windows of 128 characters as the sweep, one chip and seed. Run from the repository root:

    python notebooks/reference_grid_positions.py docs/sweeps/charlm-snr-reference-positions.png

(about 5 min on one core). Prints each line's mean bits per character.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from aocsim import compare, load_model
from aocsim.experiments.language import bucket_means, position_buckets
from aocsim.experiments.plots import plt
from aocsim.experiments.workloads import default_workload

SETTINGS = {"no noise": {}, "inputs 20 dB, states 30 dB": {"snr_db": 20.0, "snr_states_db": 30.0},
            "inputs 10 dB, states 20 dB": {"snr_db": 10.0, "snr_states_db": 20.0}}
MODELS = {"charlm-implicit": {"ema_alpha": 0.1, "snr_convergence": "batch", "rtol": 0.01, "max_iter": 30},
          "charlm-explicit1": {}, "charlm-explicit2": {}}


def main(out: Path) -> None:
    torch.set_num_threads(1)
    lines: dict[str, list[float]] = {}
    for name, own in MODELS.items():
        model = load_model(name)
        work = default_workload(model, sequences=16, length_factor=1)
        for label, noise in SETTINGS.items():
            placement = {"on_tiles": "none", "mode": "sequential", "snr_convention": "elementwise",
                         "snr_kind": "additive", **own, **noise}
            ds = compare(model, "aoc48", work.inputs, work.targets, placement=placement, seeds=(0,), chips=(0,),
                         calibration=work.calibration, progress=False)
            bits = ds.nll_bits.sel(path="device").mean([d for d in ("chip", "seed", "sample") if d in ds.nll_bits.dims])
            lines[f"{name}, {label}"] = [float(b) for b in bits.values]
            print(f"{name:18s} {label:28s} {float(bits.mean()):.3f} bits per character")
    buckets = position_buckets(128)
    fig, ax = plt.subplots(figsize=(7, 4))
    for m, name in enumerate(MODELS):
        clean = bucket_means(lines[f"{name}, no noise"])
        for s, label in enumerate(list(SETTINGS)[1:]):
            excess = [a - b for a, b in zip(bucket_means(lines[f"{name}, {label}"]), clean)]
            print(f"{name:18s} {label:28s} above its noiseless path by bucket: "
                  + "  ".join(f"{e:+.3f}" for e in excess))
            ax.plot(range(len(buckets)), excess, marker="o", color=f"C{m}", ls=["-", "--"][s], label=f"{name}, {label}")
    ax.set_xticks(range(len(buckets)), [f"{a}" if a == b else f"{a}-{b}" for a, b in buckets])
    ax.axhline(0.0, color="black", lw=0.6)
    ax.set_xlabel("characters seen")
    ax.set_ylabel("bits per character above the noiseless path")
    ax.set_title("reference conventions (elementwise, additive): what the noise costs by position", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    print(f"plot: {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "reference-grid-positions.png"))
