"""mksbatch: YAML recipes to sbatch scripts that gang-allocate, survive node failure and
resume from the newest complete checkpoint."""

from squall.mksbatch.checkpoints import newest_checkpoint
from squall.mksbatch.recipe import Recipe, load_recipe, parse_recipe
from squall.mksbatch.render import render

__all__ = ["Recipe", "load_recipe", "newest_checkpoint", "parse_recipe", "render"]
