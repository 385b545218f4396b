"""Registry of training recipes (name -> function writing a model directory)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from functools import partial

from aocsim.errors import InputError, UnknownNameError
from aocsim.io.outputs import check_output_dir, check_writable_folder
from aocsim.train import digits as _digits
from aocsim.train import state_tracking as _st

# State tracking at CPU scale (each run a few minutes on one core): parity (Z2) and A5
# trained at L = 16; explicit baselines at the same width (d_model, d_state, expand)
# with 1, 2 and 4 layers and the same number of steps. The implicit models carry a Jacobian
# penalty at the fixed point so that the equilibrium is unique (docs/STATE_TRACKING.md): parity
# 1.0; A5 0.1 (on seed 1, 1.0 and 0.3 also made the modes agree less or cost accuracy).
_PARITY = {"task": "parity", "train_length": 16, "d_model": 32, "d_state": 8, "identity_prob": 0.5}
_A5 = {"task": "A5", "train_length": 16, "d_model": 64, "d_state": 16, "identity_prob": 0.5, "lr": 3e-3,
       "steps": 5000}
STATE_TRACKING: dict[str, _st.StateTrackingRecipe] = {}
_JACOBIAN_PENALTY = {"parity": 1.0, "a5": 0.1}
for _prefix, _base in (("parity", _PARITY), ("a5", _A5)):
    STATE_TRACKING[f"{_prefix}-implicit"] = _st.StateTrackingRecipe(
        name=f"{_prefix}-implicit", implicit=True, jac_reg=_JACOBIAN_PENALTY[_prefix], **_base)
    for _layers in (1, 2, 4):
        _name = f"{_prefix}-explicit{_layers}"
        STATE_TRACKING[_name] = _st.StateTrackingRecipe(name=_name, implicit=False, n_layers=_layers, **_base)

RECIPES: dict[str, Callable[..., Path]] = {
    "digits-deq48": _digits.run_recipe,
    **{name: partial(_st.run_recipe, recipe) for name, recipe in STATE_TRACKING.items()},
}


def available_recipes() -> list[str]:
    return sorted(RECIPES)


def run(name: str, out_dir: str | Path | None = None, **options: Any) -> Path:
    """Run recipe `name`, writing `out_dir` (default `models/<name>` under the working directory)."""
    if name not in RECIPES:
        raise UnknownNameError("recipe", name, list(RECIPES))
    out = Path(out_dir) if out_dir else Path("models") / name
    # Before training: a path that cannot be written must not cost minutes of work first.
    check_output_dir(out, overwrite=bool(options.get("overwrite", False)), what="out_dir")
    if options.get("run_dir") is not None:
        check_writable_folder(options["run_dir"], what="run_dir")
    try:
        return RECIPES[name](out, **options)
    except TypeError as exc:
        if "unexpected keyword" not in str(exc):
            raise
        raise InputError(f"recipe {name!r} does not take option(s) {sorted(options)}: {exc}") from None
