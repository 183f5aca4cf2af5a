"""The one exception type a user sees: a message that says what was wrong and how to fix it."""


class SquallError(Exception):
    """An error with a one-line, actionable message; CLIs print it and exit non-zero."""

    exit_code = 1
