"""Registry of training recipes (name -> function writing a model directory)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from aocsim.errors import UnknownNameError
from aocsim.train import digits as _digits

RECIPES: dict[str, Callable[..., Path]] = {
    "digits-deq48": _digits.run_recipe,
}


def available_recipes() -> list[str]:
    return sorted(RECIPES)


def run(name: str, out_dir: str | Path | None = None, **options: Any) -> Path:
    """Run recipe `name`, writing `out_dir` (default `models/<name>` under the working directory)."""
    if name not in RECIPES:
        raise UnknownNameError("recipe", name, list(RECIPES))
    return RECIPES[name](Path(out_dir) if out_dir else Path("models") / name, **options)
