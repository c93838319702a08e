"""A cluster transaction's failover errors are the store's UNAVAILABLE (answered 503), not a
500: redis-py's own pipeline is made to fail as it did in CI (stop 58: a MOVED, still
redirected after its retries, out of the worker binding's transaction mid-failover)."""

from __future__ import annotations

import pytest
from redis.asyncio.cluster import ClusterPipeline
from redis.exceptions import AskError, MovedError, TryAgainError

from lockgate.store import UNAVAILABLE
from lockgate.store.connection import _RedisCluster


@pytest.mark.parametrize(
    "raised",
    [MovedError("14438 127.0.0.1:46847"), AskError("14438 127.0.0.1:46847"), AttributeError("x")],
    ids=["moved", "ask", "closed"],
)
async def test_a_transaction_redirected_or_cut_by_a_failover_is_unavailable(
    raised: Exception, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def failing(self: ClusterPipeline, *args: object) -> None:
        raise raised

    monkeypatch.setattr(ClusterPipeline, "execute", failing)
    # never connected: redis-py's execute, standing for a failover, fails first
    pipe = _RedisCluster(host="127.0.0.1", port=1).pipeline(transaction=True)
    with pytest.raises(UNAVAILABLE) as caught:
        await pipe.execute()
    assert caught.value.__cause__ is raised
    if isinstance(raised, AskError):
        assert isinstance(caught.value, TryAgainError) and "slot moved" in str(caught.value)


async def test_any_other_error_of_a_transaction_is_left_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def failing(self: ClusterPipeline, *args: object) -> None:
        raise ValueError("a bug")

    monkeypatch.setattr(ClusterPipeline, "execute", failing)
    pipe = _RedisCluster(host="127.0.0.1", port=1).pipeline(transaction=True)
    with pytest.raises(ValueError, match="a bug"):
        await pipe.execute()
