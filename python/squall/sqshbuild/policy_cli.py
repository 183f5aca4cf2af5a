"""``sqshbuild policy``: the site policy's tools (``compile``: filepolicy.py)."""

from __future__ import annotations

from pathlib import Path

import click

from squall.cliutil import CONTEXT_SETTINGS, log, output_options
from squall.sqshbuild import filepolicy
from squall.sqshbuild.policy import policy_path


@click.group("policy", context_settings=CONTEXT_SETTINGS)
def policy_group() -> None:
    """The site image policy (/etc/containers/policy.json, docs/registries.md)."""


@policy_group.command("compile")
@click.option("--output", type=click.Path(path_type=Path, dir_okay=False),
              default=filepolicy.COMPILED, show_default=True,
              help="Where the compiled scope for local files goes.")
@output_options
def compile_cmd(output: Path) -> None:
    """Compile the policy's squall-sqsh transport (.sqsh files named by path) for the
    plugin, which runs this as root when the policy file changed."""
    filepolicy.compile_file(policy_path(), output)
    log.info("%s: compiled from %s", output, policy_path())
