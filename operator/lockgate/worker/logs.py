"""The worker's logger: one human-readable line per event on stderr."""

from __future__ import annotations

import logging
import sys

LOGGER_NAME = "lockgate.worker"
LINE_FORMAT = "%(asctime)s %(levelname)-7s %(name)s | %(message)s"

log = logging.getLogger(LOGGER_NAME)


def setup(level: str) -> None:
    """Send `lockgate.worker` records to stderr at `level`, unless the app set up its own."""
    known = logging.getLevelNamesMapping()
    log.setLevel(known.get(level.upper(), logging.INFO))
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(LINE_FORMAT))
        log.addHandler(handler)
        log.propagate = False  # the root logger may print to stderr too: avoid doubled lines
    if level.upper() not in known:
        log.warning("unknown LOCKGATE_LOG_LEVEL %r, using INFO", level)
