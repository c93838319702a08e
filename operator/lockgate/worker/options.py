"""The dict given to `start()`: the handler and how to run it (runpod's config keys)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from . import batching, handlers
from .batching import BatchOptions
from .handlers import Handler

ConcurrencyModifier = Callable[[int], int]


def keep_concurrency(current: int) -> int:
    """The default concurrency modifier: one job at a time unless told otherwise."""
    return current


@dataclass(frozen=True)
class StartOptions:
    """What `start()` was asked to run.

    `refresh_worker` makes the worker exit after each job, for a fresh process. With
    `batch` the handler takes a list of jobs (`batching`); the worker then holds
    2 x `max_size` jobs (one batch in the call, the next forming) unless
    `concurrency_modifier` says otherwise.
    """

    handler: Handler
    return_aggregate_stream: bool = False
    concurrency_modifier: ConcurrencyModifier = keep_concurrency
    refresh_worker: bool = False
    batch: BatchOptions | None = None

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> StartOptions:
        """Validate a `start()` config; raise TypeError naming the bad key, or
        BatchOptionsError (a ValueError) for a `batch` that cannot be used."""
        handler = config.get("handler")
        if not callable(handler):
            raise TypeError('start() needs {"handler": <function taking the job dict>}')
        modifier = config.get("concurrency_modifier") or keep_concurrency
        if not callable(modifier):
            raise TypeError("concurrency_modifier must be a function (current: int) -> int")
        batch = None
        if config.get("batch") is not None:
            batch = BatchOptions.from_value(config["batch"])
            batching.check_handler(handlers.kind_of(handler))
            if modifier is keep_concurrency:  # a batch in the call, the next one forming
                modifier = functools.partial(_constant, 2 * batch.max_size)
        return cls(
            handler=handler,
            return_aggregate_stream=bool(config.get("return_aggregate_stream", False)),
            concurrency_modifier=modifier,
            refresh_worker=bool(config.get("refresh_worker", False)),
            batch=batch,
        )


def _constant(value: int, _current: int) -> int:
    return value
