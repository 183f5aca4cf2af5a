"""The CLI edge: the one place where errors become a one-line message and an exit code."""

from __future__ import annotations

import sys
from collections.abc import Callable

import click

from squall.errors import SquallError


def run_cli(command: click.Command, prog: str) -> Callable[[], None]:
    """Return a ``main()`` that runs ``command`` and turns a SquallError into ``prog: message``."""

    def main() -> None:
        try:
            command.main(prog_name=prog, standalone_mode=False)
        except SquallError as exc:
            click.echo(f"{prog}: error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo(f"{prog}: aborted", err=True)
            sys.exit(130)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo(f"{prog}: interrupted", err=True)
            sys.exit(130)

    return main
