"""Waiting between attempts when the gateway is unreachable or overloaded."""

from __future__ import annotations

import asyncio

FIRST_DELAY_S = 0.5
MAX_DELAY_S = 5.0


class Backoff:
    """Delays that start at 0.5 s and double up to 5 s until `reset`."""

    def __init__(self, first_s: float = FIRST_DELAY_S, max_s: float = MAX_DELAY_S) -> None:
        self._first_s = first_s
        self._max_s = max_s
        self.delay_s = first_s

    def reset(self) -> None:
        """Start again from the first delay (after a success)."""
        self.delay_s = self._first_s

    async def wait(self) -> None:
        """Sleep the current delay, then double it."""
        await asyncio.sleep(self.delay_s)
        self.delay_s = min(self._max_s, self.delay_s * 2)
