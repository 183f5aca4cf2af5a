"""The library's logger: every squall module logs through :data:`log`.

The library only emits records; it never sets a level or a handler. The command-line
front ends (:mod:`squall.cliutil`) configure it for ``-v``/``-q``, so importing a library
module never pulls in a CLI toolkit.
"""

from __future__ import annotations

import logging

LOGGER_NAME = "squall"

log = logging.getLogger(LOGGER_NAME)
