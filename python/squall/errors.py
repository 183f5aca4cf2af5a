"""The exceptions a user sees: a message that says what was wrong and how to fix it.

The class says which exit status the command ends with (docs/cli.md): 1 when the
command ran and found a problem (a failed check, an image that could not be built, a
job that did not complete), 2 when it could not run as asked.
"""


class SquallError(Exception):
    """An error with a one-line, actionable message; CLIs print it and exit non-zero."""

    exit_code = 1


class UsageError(SquallError):
    """A bad argument, option or combination of them (exit 2)."""

    exit_code = 2


class SetupError(SquallError):
    """This machine lacks what the command needs: a tool, a readable input, a writable
    directory, the Slurm commands (exit 2)."""

    exit_code = 2
