"""Training recipes: `aocsim train RECIPE` looks them up in `RECIPES`."""

from aocsim.train.recipes import RECIPES, available_recipes, run

__all__ = ["RECIPES", "available_recipes", "run"]
