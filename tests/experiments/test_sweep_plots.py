"""Sweep figures a paper can use (issue 26, finding 9): axes labelled in words with the profile schema's
units, log axes with labelled ticks, Pareto fronts whose labels name their settings and do not overlap."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
import pytest
import xarray as xr

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from aocsim.experiments.sweep import plots  # noqa: E402


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> list:
    """The figures the plot functions draw, kept open for inspection instead of closed after saving."""
    kept: list = []
    monkeypatch.setattr(plt, "close", lambda fig=None: kept.append(fig))
    return kept


def _power_sweep() -> xr.Dataset:
    power = np.array([1e-6, 3e-6, 1e-5, 3e-5, 1e-4, 3e-4, 1e-3])
    acc = np.array([0.49, 0.55, 0.97, 1.0, 1.0, 1.0, 1.0])[None, :, None, None] * np.ones((1, 7, 2, 2))
    energy = np.array([16.4, 16.5, 17.0, 18.4, 6.2, 3.4, 7.6])[None, :, None, None] * 1e-6 * np.ones((1, 7, 2, 2))
    dims = ("model", "noise.power_per_unit_w", "chip", "seed")
    ds = xr.Dataset({"accuracy": (dims, acc), "energy_per_inference_j": (dims, energy)},
                    coords={"model": ["parity-implicit"], "noise.power_per_unit_w": power, "chip": [0, 1],
                            "seed": [0, 1]})
    ds["energy_per_inference_j"].attrs["units"] = "J"
    return ds


def _tile_sweep() -> xr.Dataset:
    dims = ("model", "placement.tile_size", "placement.partial_sums", "chip", "seed")
    acc = np.array([[1.0, 1.0], [1.0, 1.0], [0.77, 1.0], [1.0, 1.0]])[None, :, :, None, None] * np.ones((1, 4, 2, 1, 2))
    energy = np.array([[132, 134], [51, 52], [7.2, 6.7], [6.1, 6.9]])[None, :, :, None, None] * 1e-6 * np.ones(
        (1, 4, 2, 1, 2))
    return xr.Dataset({"accuracy": (dims, acc), "energy_per_inference_j": (dims, energy)},
                      coords={"model": ["parity-implicit"], "placement.tile_size": [16, 24, 32, 48],
                              "placement.partial_sums": ["analog", "digital"], "chip": [0], "seed": [0, 1]})


def _texts(fig) -> list:
    fig.canvas.draw()
    out = [t for ax in fig.axes for t in ax.texts if t.get_text()]
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is not None:
            out += [t for t in legend.get_texts() if t.get_text()]
    return out


def test_a_line_plot_names_its_axes_in_words_with_units(tmp_path: Path, figures: list) -> None:
    plots.plot_sweep(_power_sweep(), tmp_path / "p.png")
    ax = figures[-1].axes[0]
    xlabel, ylabel = ax.get_xlabel(), ax.get_ylabel()
    assert "optical power on one photodetector" in xlabel and "(W)" in xlabel and "noise.power_per_unit_w" in xlabel
    assert "accuracy" in ylabel and "(%)" in ylabel
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert len(labels) == 7 and all("W" in text for text in labels)  # a labelled tick at every swept power
    assert "1 µW" in labels and "1 mW" in labels


def test_the_pareto_front_names_its_settings_without_overlap(tmp_path: Path, figures: list) -> None:
    plots.plot_pareto(_tile_sweep(), tmp_path / "front.png")
    fig = figures[-1]
    ax = fig.axes[0]
    texts = _texts(fig)
    settings = [t.get_text() for t in texts if "tile_size" in t.get_text()]
    assert settings and all("partial_sums" in s and "=" in s for s in settings)
    boxes = [t.get_window_extent() for t in texts]
    for i in range(len(boxes)):
        for j in range(i + 1, len(boxes)):
            assert not boxes[i].overlaps(boxes[j]), (texts[i].get_text(), texts[j].get_text())
    ticks = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert len(ticks) >= 3 and all("J" in text for text in ticks)  # 6 to 134 uJ: more than a decade's end
    assert "energy" in ax.get_xlabel() and "(J)" in ax.get_xlabel()


def test_a_heat_map_names_both_axes(tmp_path: Path, figures: list) -> None:
    ds = _tile_sweep()
    plots.plot_sweep(ds, tmp_path / "heat.png")
    ax = figures[-1].axes[0]
    assert ax.get_xlabel().startswith("partial sums") and ax.get_ylabel().startswith("tile size (channels")


def _tick_boxes(fig, axis) -> list:
    fig.canvas.draw()
    return [t.get_window_extent() for t in axis.get_ticklabels() if t.get_visible() and t.get_text()]


def _crowded() -> xr.Dataset:
    """Costs over eight decades and many settings: labelled ticks at 1, 2 and 5 per decade would collide."""
    power = np.logspace(-8, -2, 25)
    acc = np.linspace(0.5, 1.0, 25)[None, :, None, None] * np.ones((1, 25, 1, 2))
    energy = np.logspace(-9, -1, 25)[None, :, None, None] * np.ones((1, 25, 1, 2))
    dims = ("model", "noise.power_per_unit_w", "chip", "seed")
    ds = xr.Dataset({"accuracy": (dims, acc), "energy_per_inference_j": (dims, energy),
                     "trusted": (("model", "noise.power_per_unit_w"), np.ones((1, 25), dtype=np.int8))},
                    coords={"model": ["parity-implicit"], "noise.power_per_unit_w": power, "chip": [0], "seed": [0, 1]})
    ds["energy_per_inference_j"].attrs["units"] = "J"
    return ds


@pytest.mark.parametrize("draw", ["pareto", "sweep"])
def test_tick_labels_never_overlap_and_accuracy_stays_within_0_to_100_percent(tmp_path: Path, figures: list,
                                                                               draw: str) -> None:
    """Issue 41, finding 2: crowded cost axes keep every k-th label; a band of +-1 std at 100 % accuracy does
    not stretch the axis to 104 %."""
    from aocsim.experiments.sweep.labels import _overlap

    ds = _crowded()
    ds["accuracy"][0, -5:, 0, 1] = 0.9  # a spread: the band reaches above 100 % at the top points
    ds["accuracy"][0, -5:, 0, 0] = 1.0
    plots.plot_pareto(ds, tmp_path / "p.png") if draw == "pareto" else plots.plot_sweep(ds, tmp_path / "s.png")
    fig = figures[-1]
    ax = fig.axes[0]
    for axis in (ax.xaxis, ax.yaxis):
        boxes = _tick_boxes(fig, axis)
        assert len(boxes) >= 3 and not _overlap(sorted(boxes, key=lambda b: (b.x0, b.y0))), axis
    low, high = ax.get_ylim()
    assert 0.0 <= low and high <= 1.0


def test_untrusted_points_are_marked_and_left_off_the_pareto_front(tmp_path: Path, figures: list) -> None:
    ds = _crowded()
    ds["trusted"][0, -1] = 0  # the most accurate point: compare did not trust it
    plots.plot_pareto(ds, tmp_path / "p.png")
    labels = [t.get_text() for t in figures[-1].axes[0].get_legend().get_texts()]
    assert any("untrusted" in t for t in labels)
    assert not any("power_per_unit_w=0.01" in t for t in labels)  # its settings are not named on the front
    plots.plot_sweep(ds, tmp_path / "s.png")
    labels = [t.get_text() for t in figures[-1].axes[0].get_legend().get_texts()]
    assert any("untrusted" in t for t in labels)


def test_aocsim_plot_draws_the_reference_grid_as_its_heat_maps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`aocsim plot` on a sweep over state and input noise (docs/sweeps/charlm-snr-reference-baselines.nc) draws
    the grid's heat maps, a panel per model and noise kind; any other sweep keeps the generic figure."""
    from click.testing import CliRunner

    from aocsim.cli import main
    from aocsim.experiments import language

    docs = Path(__file__).resolve().parents[2] / "docs" / "sweeps"
    drawn: list[tuple[str, ...]] = []
    real = language.plot_snr_heat_maps
    monkeypatch.setattr(language, "plot_snr_heat_maps",
                        lambda ds, out, **kw: drawn.append(kw["panels"]) or real(ds, out, **kw))
    out = CliRunner().invoke(main, ["plot", str(docs / "charlm-snr-reference-baselines.nc"), "--out",
                                    str(tmp_path / "grid.png")])
    assert out.exit_code == 0, out.output
    assert drawn == [("model", "placement.snr_kind")] and (tmp_path / "grid.png").stat().st_size > 20_000
    other = CliRunner().invoke(main, ["plot", str(docs / "charlm-snr-abstract.nc"), "--out", str(tmp_path / "a.png")])
    assert other.exit_code == 0, other.output
    assert len(drawn) == 1 and (tmp_path / "a.png").exists()
