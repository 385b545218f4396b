"""Can a `compare` result be trusted? Three checks on its Dataset, each a one-line note naming the likely cause.

A device run can finish without an error and still say nothing: `aocsim compare parity-implicit
--device aoc16` once printed "accuracy device ~52 %" and "converged 2048" with exit code 0, while
the tile programs had not converged on that machine (docs/DEVICE_RUNS.md, section 1b). These
checks read only the Dataset:

1. **chance**: the device's accuracy (pooled over chips, seeds and samples) lies within
   `chance_band` of 1 / classes while the exact path's is well above it (more than twice the band);
2. **agreement**: the device's predictions agree with the exact ones on a share more than
   `AGREEMENT_GAP` below the model's own (exact) accuracy: the device changes answers the model
   gets right;
3. **status**: most device solves report converged (their residual met the tolerance) yet the
   accuracy is at chance: the loop settles, but on fixed points of another map than the model's.

A regression has no chance level: **spread**, its device error (mean squared, pooled) is at least the
spread of the exact path's outputs (their variance) while its exact error is well below it (under a
tenth): the device's outputs say no more than their mean would.

4. **calibration** (models on tiles): the worst chip's tile programs have a matrix error above
   `PROGRAM_ERROR_LIMIT`: the placement did not calibrate on this device, whatever the answers.

`trust_attributes` stores the outcome in the Dataset (`trusted` 1 or 0, `warnings` one note per
line), `aocsim compare` prints the notes under its summary. Models without targets (no accuracy)
are not checked.
"""

from __future__ import annotations

import math
from typing import Any

import xarray as xr

import aocsim.execute.registry  # noqa: F401  (defines the bundled kinds: a Dataset read back names one)
from aocsim.execute.placed import PlacedModel, kind_class, tiles_hint
from aocsim.experiments.metrics import inference_unit
from aocsim.solve.result import SolveStatus

PROGRAM_ERROR_LIMIT = 0.5  # a tile program whose matrix error exceeds 50 % did not calibrate
AGREEMENT_GAP = 0.10  # agreement this far (10 points) below the exact accuracy is "far below"
CHANCE_FLOOR = 0.05  # the chance band is at least 5 points wide either side
SIGMAS = 3.0  # ... or 3 binomial standard errors, whichever is wider


def chance_band(classes: int, n: int) -> float:
    """Half-width of the band around chance 1 / classes in which an accuracy over `n` answers is "at chance":
    max(CHANCE_FLOOR, SIGMAS sqrt(p (1 - p) / n)) with p = 1 / classes. The floor stands for the answers'
    correlation (a sequence model's tokens after a lost state), which the binomial error ignores."""
    p = 1.0 / classes
    return max(CHANCE_FLOOR, SIGMAS * math.sqrt(p * (1.0 - p) / max(n, 1)))


def classes_of(ds: xr.Dataset) -> int:
    """The number of classes: the Dataset's `classes` attribute, else the largest prediction + 1 (a lower bound)."""
    if "classes" in ds.attrs:
        return int(ds.attrs["classes"])
    return int(ds.prediction.max()) + 1


def _cause(ds: xr.Dataset, shares: dict[SolveStatus, float]) -> str:
    """The likely cause, from how the model was placed and how its solves ended (`shares`: each status's
    share of the device solves)."""
    if shares[SolveStatus.CONVERGED] + shares[SolveStatus.NOISE_FLOOR] < 0.5:
        return ("most device solves stopped without converging (max_iter or diverged): noise above the "
                "tolerance or an unstable loop; compare with --set noise.multiplier=0")
    if shares[SolveStatus.NOISE_FLOOR] > shares[SolveStatus.CONVERGED]:
        return ("noise swamps the state (most solves stopped at the predicted noise floor); lower "
                "noise.multiplier or raise noise.power_per_unit_w (--set KEY=VALUE)")
    kind = kind_class(str(ds.attrs.get("kind"))) or PlacedModel  # the kind's own words (aocsim/execute/placed.py)
    return kind.untrusted_cause(ds.attrs)


def placement_notes(ds: xr.Dataset) -> list[str]:
    """The placement's own check: tile programs whose matrix error (the worst chip's, `max_program_error`)
    exceeds PROGRAM_ERROR_LIMIT did not calibrate on this device, whatever the answers look like."""
    error = float(ds.attrs.get("max_program_error", 0.0))
    if error <= PROGRAM_ERROR_LIMIT:
        return []
    device = ds.attrs.get("device", "this device")
    return [f"the tile programs did not calibrate on {device}: matrix error {100 * error:.0f} % (above "
            f"{100 * PROGRAM_ERROR_LIMIT:.0f} %); the tiles compute another matrix than the model's ({tiles_hint(device)})"]


def regression_notes(ds: xr.Dataset) -> list[str]:
    """A regression's check (module docstring, **spread**)."""
    exact_out = ds.prediction.sel(path="exact").isel(chip=0, seed=0)
    spread = float(exact_out.var())
    device = float(ds.squared_error.sel(path="device").mean())
    exact = float(ds.squared_error.sel(path="exact").isel(chip=0, seed=0).mean())
    if device < spread or exact > 0.1 * spread:
        return []
    status = ds.status.sel(path="device").values
    cause = _cause(ds, {s: float((status == s.value).mean()) for s in SolveStatus})
    return [f"device mean squared error {device:.3g} is at least the variance of the model's outputs ({spread:.3g}) "
            f"while the exact path's is {exact:.3g}: the device's outputs say no more than their mean; likely cause: "
            f"{cause}"]


def trust_notes(ds: xr.Dataset) -> list[str]:
    """One line per failed check (module docstring); [] when the result looks sound."""
    if "squared_error" in ds:
        return placement_notes(ds) + regression_notes(ds)
    if "correct" not in ds:
        return placement_notes(ds)
    unit = inference_unit(ds)
    device = ds.correct.sel(path="device")
    n = int(device.size)
    accuracy = float(device.mean())
    exact = float(ds.correct.sel(path="exact").isel(chip=0, seed=0).mean())
    agreement = float(ds.agreement.mean())
    status = ds.status.sel(path="device").values
    shares = {s: float((status == s.value).mean()) for s in SolveStatus}
    classes = classes_of(ds)
    chance, band = 1.0 / classes, chance_band(classes, n)
    at_chance = abs(accuracy - chance) <= band and exact - chance > 2 * band
    cause = _cause(ds, shares)
    notes = []
    if at_chance:
        notes.append(f"device accuracy {100 * accuracy:.2f} % is at chance (1/{classes} = {100 * chance:.1f} % "
                     f"+- {100 * band:.1f} points over {n} {unit}s) while the exact path has {100 * exact:.2f} %: the "
                     f"device's answers carry no information; likely cause: {cause}")
    if agreement < exact - AGREEMENT_GAP:
        notes.append(f"agreement {100 * agreement:.2f} % is more than {100 * AGREEMENT_GAP:.0f} points below the "
                     f"model's own accuracy {100 * exact:.2f} %: the device changes answers the model gets right; "
                     f"likely cause: {cause}")
    if at_chance and shares[SolveStatus.CONVERGED] > 0.5:
        notes.append(f"{100 * shares[SolveStatus.CONVERGED]:.0f} % of the device solves converged (their residual "
                     f"met the tolerance), yet the accuracy is at chance: the loop settles on the fixed points of "
                     f"another map than the model's; likely cause: {cause}")
    return placement_notes(ds) + notes


def trust_attributes(ds: xr.Dataset) -> dict[str, Any]:
    """`trusted` (1: no check failed, 0: see `warnings`) and `warnings` (one note per line), as attributes."""
    notes = trust_notes(ds)
    return {"trusted": int(not notes), "warnings": "\n".join(notes)}
