"""Every notebook in notebooks/ runs from top to bottom without errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

FOLDER = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOKS = sorted(FOLDER.glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nbformat = pytest.importorskip("nbformat")
    # the kernel's torch on this worker's share of the cores, as the worker's own (tests/conftest.py): on
    # every core beside another busy worker (a compiler, say) the quickstart took 43 s instead of 6-18 s
    monkeypatch.setenv("OMP_NUM_THREADS", str(torch.get_num_threads()))
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(path, as_version=4)
    shutil.copytree(FOLDER / "sweeps", tmp_path / "sweeps")  # the sweep specs, where the notebooks find them
    before = set(tmp_path.iterdir())
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    # run in the checkout's notebooks/ folder, a notebook must leave nothing there (issue 26, finding 10)
    left = sorted(p.name for p in set(tmp_path.iterdir()) - before)
    assert not left, f"{path.name} leaves {left} in the folder it runs in; expected its files in a temporary folder"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebooks_are_saved_with_their_outputs(path: Path) -> None:
    """Read on GitHub, a notebook shows what it computes: every code cell was run, top to bottom in one
    session, and the notebook has outputs (tables, figures)."""
    nbformat = pytest.importorskip("nbformat")
    cells = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    assert [c.execution_count for c in cells] == list(range(1, len(cells) + 1)), f"{path.name} is not executed"
    assert any(c.outputs for c in cells)
    assert not any(o.output_type == "error" for c in cells for o in c.outputs)


def test_the_notebooks_readme_names_every_notebook() -> None:
    text = (FOLDER / "README.md").read_text()
    assert [p.name for p in NOTEBOOKS if p.name not in text] == []


SWEEP_NOTEBOOKS = sorted(FOLDER.glob("sweep_*.ipynb"))


class _Stop(Exception):
    """Raised by the stand-in for `sweep`: the spec is all the test needs."""


@pytest.mark.parametrize("path", SWEEP_NOTEBOOKS, ids=[p.name for p in SWEEP_NOTEBOOKS])
def test_sweep_notebooks_keep_their_specs_settings(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A notebook runs a corner of its spec (issue 26, finding 3): fewer values, data, seeds and chips, never
    another study. Every swept parameter of the spec stays swept, over a subset of its values, and the
    model, device, metrics and root seed stay as they are (digits-bits once lost placement.stop: readout,
    so that the ADC's bits showed no effect). The notebook's spec cell runs with `sweep` stood in for."""
    import json
    import re

    import yaml

    import aocsim.experiments.sweep as sweeps

    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("IPython")
    cell = next(c.source for c in nbformat.read(path, as_version=4).cells
                if c.cell_type == "code" and "sweeps/" in c.source and "sweep(" in c.source)
    spec_file = FOLDER / re.search(r"sweeps/[\w.-]+\.yaml", cell).group(0)
    seen = []

    def stand_in(spec, *args, **kwargs):
        seen.append(spec)
        raise _Stop

    monkeypatch.setattr(sweeps, "sweep", stand_in)
    monkeypatch.chdir(FOLDER)
    with pytest.raises(_Stop):
        exec(compile(cell, str(path), "exec"), {})  # noqa: S102 (the notebook's own cell)
    ran, spec = seen[0].source, yaml.safe_load(spec_file.read_text())
    for key in ("model", "device", "metrics", "root_seed"):
        assert json.dumps(ran.get(key)) == json.dumps(spec.get(key)), f"{path.name} changed {key}"
    for block in ("axes", "zip"):
        for param, values in (spec.get(block) or {}).items():
            kept = (ran.get(block) or {}).get(param)
            assert kept is not None, f"{path.name} drops {block}.{param} of {spec_file.name}"
            assert set(map(str, kept)) <= set(map(str, values)), f"{path.name}: {block}.{param} = {kept}"
    assert ("random" in ran) == ("random" in spec)
