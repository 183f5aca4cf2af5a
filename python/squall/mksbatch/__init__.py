"""mksbatch: YAML recipes to sbatch scripts that gang-allocate, survive node failure and
resume from the newest complete checkpoint.

The Python API (documented in docs/mksbatch.md): ``load_recipe`` / ``parse_recipe`` /
``recipe_from_dict`` validate a recipe (with overrides), ``override`` changes one,
``render`` writes its script, ``submit`` submits it and ``watch`` follows the job,
``newest_checkpoint`` says where it would resume from, ``recipe_schema`` is its JSON Schema.
"""

from squall.mksbatch.checkpoints import newest_checkpoint
from squall.mksbatch.container import Container
from squall.mksbatch.jobs import submit
from squall.mksbatch.overrides import Override
from squall.mksbatch.recipe import (
    Checkpoint,
    Recipe,
    load_recipe,
    override,
    parse_recipe,
    recipe_dict,
    recipe_from_dict,
)
from squall.mksbatch.render import render
from squall.mksbatch.schema import recipe_schema
from squall.mksbatch.watch import watch
from squall.mksbatch.yamlpos import RecipeError

__all__ = [
    "Checkpoint", "Container", "Override", "Recipe", "RecipeError", "load_recipe",
    "newest_checkpoint", "override", "parse_recipe", "recipe_dict", "recipe_from_dict",
    "recipe_schema", "render", "submit", "watch",
]
