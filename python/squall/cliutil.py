"""What the three commands (``sqshbuild``, ``mksbatch``, ``squall``) share, so they behave
alike (docs/cli.md): ``-h/--help``, ``--version``, ``-v/--verbose``, ``-q/--quiet``,
``--json``, one error line ``PROG: error: MESSAGE``, and the exit status

* 0: done, the check passed;
* 1: the command ran and found a problem (:class:`~squall.errors.SquallError`);
* 2: it could not run as asked: a bad option or argument, or the machine lacks something
  it needs (:class:`~squall.errors.UsageError`, :class:`~squall.errors.SetupError`);
* 130: interrupted.

``run_cli`` is the one place where an exception becomes that line and status. Shell
completion is click's own (``eval "$(_SQUALL_COMPLETE=bash_source squall)"``).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from squall import __version__
from squall.errors import SquallError
from squall.log import log as log  # the CLIs configure it; re-exported for them

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

# For every command and subcommand (click passes it down to subcommands).
CONTEXT_SETTINGS: dict[str, Any] = {"help_option_names": ["-h", "--help"],
                                    "max_content_width": 100}

F = TypeVar("F", bound=Callable[..., Any])


class _Output:
    """How chatty this run is: -1 quiet, 0 normal, 1.. verbose (set by the options)."""

    verbose = 0
    quiet = False


_out = _Output()


def verbosity() -> int:
    """-1 with ``-q``, 0 by default, the number of ``-v`` otherwise."""
    return -1 if _out.quiet else _out.verbose


def is_quiet() -> bool:
    return _out.quiet


def _set_level() -> None:
    if _out.quiet:
        log.setLevel(logging.ERROR)
    else:
        log.setLevel({0: logging.WARNING, 1: logging.INFO}.get(_out.verbose, logging.DEBUG))


def _on_verbose(ctx: click.Context, _param: click.Parameter, value: int) -> None:
    if not value or ctx.resilient_parsing:
        return
    if _out.quiet:
        raise click.UsageError("-v/--verbose and -q/--quiet together: choose one", ctx)
    _out.verbose += value
    _set_level()


def _on_quiet(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    if _out.verbose:
        raise click.UsageError("-v/--verbose and -q/--quiet together: choose one", ctx)
    _out.quiet = True
    _set_level()


def output_options(f: F) -> F:
    """``-v/--verbose`` (repeatable) and ``-q/--quiet``; read them with :func:`verbosity`."""
    f = click.option("-q", "--quiet", is_flag=True, expose_value=False, callback=_on_quiet,
                     help="Print only the result (or nothing); errors still go to stderr.")(f)
    f = click.option("-v", "--verbose", count=True, expose_value=False, callback=_on_verbose,
                     help="Say more on stderr (-vv: debugging, with tracebacks).")(f)
    return f


def json_option(f: F) -> F:
    """``--json``: the result as JSON on stdout (the function gets ``as_json``)."""
    return click.option("--json", "as_json", is_flag=True,
                        help="Print the result as JSON on stdout.")(f)


def version_option(prog: str) -> Callable[[F], F]:
    return click.version_option(__version__, "--version", prog_name=prog,
                                message="%(prog)s %(version)s")


def print_json(obj: object) -> None:
    click.echo(json.dumps(obj, indent=2))


class _EchoHandler(logging.Handler):
    """Log records as ``PROG: message`` on the current stderr (tests swap it)."""

    def __init__(self, prog: str) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter(f"{prog}: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        click.echo(self.format(record), err=True)


def _start(prog: str) -> None:
    _out.verbose, _out.quiet = 0, False
    for h in list(log.handlers):
        if isinstance(h, _EchoHandler):
            log.removeHandler(h)
    log.addHandler(_EchoHandler(prog))
    log.propagate = False
    _set_level()


def _fail(prog: str, message: str, code: int, exc: BaseException | None = None) -> NoReturn:
    click.echo(f"{prog}: error: {message}", err=True)
    if exc is not None and _out.verbose >= 2:
        traceback.print_exception(exc, file=sys.stderr)
    elif exc is not None and _out.verbose >= 1:
        cause = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
        while cause is not None:
            click.echo(f"{prog}: cause: {type(cause).__name__}: {cause}", err=True)
            cause = cause.__cause__ or (None if cause.__suppress_context__ else
                                        cause.__context__)
    sys.exit(code)


def _stdout_gone() -> NoReturn:
    """The reader of stdout went away (``| head``): end quietly, as ``cat`` does."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    sys.exit(EXIT_PROBLEM)


def run_cli(command: click.Command, prog: str) -> Callable[[], None]:
    """Return a ``main()`` that runs ``command``: every error ends as one line on stderr,
    ``PROG: error: MESSAGE``, and the exit status of the module docstring."""

    def main() -> None:
        _start(prog)
        try:
            rv = command.main(prog_name=prog, standalone_mode=False)
            sys.stdout.flush()
        except SquallError as exc:
            _fail(prog, str(exc), exc.exit_code, exc)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else prog
            _fail(prog, f"{exc.format_message().rstrip('.')} (see '{where} --help')",
                  EXIT_USAGE)
        except click.exceptions.Abort:
            _fail(prog, "aborted", EXIT_INTERRUPTED)
        except click.ClickException as exc:
            _fail(prog, exc.format_message(), EXIT_USAGE)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            _fail(prog, "interrupted", EXIT_INTERRUPTED)
        except BrokenPipeError:
            _stdout_gone()
        except OSError as exc:
            where = f" ({exc.filename})" if exc.filename else ""
            _fail(prog, f"{exc.strerror or exc}{where}: check the path and its permissions",
                  EXIT_USAGE, exc)
        except Exception as exc:  # a bug: still one line, the traceback on request
            _fail(prog, f"internal error: {type(exc).__name__}: {exc} (a bug in squall: "
                  f"run again with -vv for the traceback and report it)", EXIT_USAGE, exc)
        if isinstance(rv, int) and rv:
            sys.exit(rv)

    return main
