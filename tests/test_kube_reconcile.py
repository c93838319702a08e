"""Reconcile steps that need Redis but no API server: endpoint ids are cluster-wide."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from redis.asyncio import Redis

from lockgate.kube.cluster import WorkerKey
from lockgate.kube.manifests.names import Owner
from lockgate.kube.reconcile import (
    Context,
    batch_pool_due,
    clean_up,
    key_may_rotate,
    register,
)
from lockgate.kube.settings import OperatorSettings
from lockgate.models import EndpointSpec
from lockgate.models.batch import BatchLimits
from lockgate.store import JobStore, NewJob, Registry, key_digest
from lockgate.store.batches import BatchStore


class FakeCluster:
    """Just enough of `Cluster` for registration: one worker key per owner, no Secrets."""

    def __init__(self) -> None:
        self.keys: dict[str, str] = {}

    async def worker_key(self, owner: Owner, known_digest: str | None, **_: bool) -> WorkerKey:
        if owner.uid in self.keys:
            return WorkerKey(key_digest(self.keys[owner.uid]), None)
        key = self.keys.setdefault(owner.uid, f"lgw_{owner.uid}")
        return WorkerKey(key_digest(key), key)

    async def read(self, kind: str, namespace: str, name: str) -> None:
        return None


def context(redis: Redis) -> Context:
    settings = OperatorSettings(base_url="https://jobs.example")
    return Context(settings, FakeCluster(), redis, Registry(redis), JobStore(redis))  # type: ignore[arg-type]


async def test_endpoint_id_used_in_another_namespace_is_refused(redis: Redis) -> None:
    ctx = context(redis)
    digest, ok = await register(ctx, Owner("shared", "team-a", "uid-a"), EndpointSpec())
    assert ok.ok and digest

    digest, taken = await register(ctx, Owner("shared", "team-b", "uid-b"), EndpointSpec())

    assert digest is None
    assert (taken.ok, taken.reason, taken.fatal) == (False, "EndpointIdTaken", True)
    assert "team-a" in taken.message
    assert (await ctx.registry.get_endpoint("shared")).namespace == "team-a"


async def test_cleanup_of_the_refused_endpoint_leaves_the_owners_data(redis: Redis) -> None:
    ctx = context(redis)
    await register(ctx, Owner("shared", "team-a", "uid-a"), EndpointSpec())
    await ctx.jobs.submit("shared", NewJob(id="j1", input=b"{}", ttl_ms=60_000))

    assert await clean_up(ctx, "shared", "team-b") == 0

    assert await ctx.registry.get_endpoint("shared") is not None
    assert (await ctx.jobs.snapshot("shared")).in_queue == 1


async def test_a_registration_after_the_clean_up_brings_nothing_back(redis: Redis) -> None:
    """A resync begun before the delete registers after the clean-up: refused, so neither
    the entry nor the worker key of the deleted Endpoint comes back; an Endpoint made again
    with the same name (a new uid) registers."""
    ctx = context(redis)
    owner = Owner("gone", "ns", "uid-1")
    digest, _ = await register(ctx, owner, EndpointSpec())
    assert digest is not None
    await clean_up(ctx, "gone", "ns", "uid-1")

    late, check = await register(ctx, owner, EndpointSpec())

    assert late is None and (check.ok, check.reason) == (False, "Deleted")
    assert await ctx.registry.get_endpoint("gone") is None
    assert await ctx.registry.get_key(digest) is None
    again, _ = await register(ctx, Owner("gone", "ns", "uid-2"), EndpointSpec())
    assert again is not None and await ctx.registry.get_endpoint("gone") is not None


async def test_registration_is_idempotent_and_carries_the_settings(redis: Redis) -> None:
    ctx = context(redis)
    owner = Owner("ep", "ns", "uid")
    first, _ = await register(ctx, owner, EndpointSpec(executionTimeoutMs=9_000))
    second, _ = await register(ctx, owner, EndpointSpec(executionTimeoutMs=9_000))

    assert first == second
    entry = await ctx.registry.get_endpoint("ep")
    assert entry.executionTimeoutMs == 9_000
    assert entry.jobApiUrl == "https://jobs.example/v2/ep/"
    assert (await ctx.registry.get_key(first))["endpoints"] == ["ep"]


@pytest.mark.parametrize(
    ("created", "may_rotate"),
    [
        ("", True),  # unknown age: nothing to wait for
        ("2026-01-01T11:59:30Z", False),  # 30 s old: a concurrent reconcile may be registering
        ("2026-01-01T11:59:00Z", True),  # 60 s old: an unknown key is a lost one
        ("2025-12-31T12:00:00Z", True),
    ],
)
def test_a_worker_key_nobody_knows_is_rotated_only_once_its_endpoint_has_settled(
    created: str, may_rotate: bool
) -> None:
    assert key_may_rotate(created, datetime(2026, 1, 1, 12, 0, tzinfo=UTC), 60) is may_rotate


async def test_a_running_batch_without_its_pool_ends_an_endpoints_rest(redis: Redis) -> None:
    """An idle Endpoint's resync rests (`resync_rest_s`, 300 s) unless a finalized batch of
    it waits for the batch pool a full reconcile makes (kube/handlers.py `_resync`)."""
    body = {"metadata": {"name": "ep", "namespace": "team-a", "uid": "u-1", "generation": 3}}
    assert not await batch_pool_due(context(redis), body)  # no batch
    batches = BatchStore(redis)
    await batches.create("ep", "batch_a", 1, [("r1", b'{"input": {}}')], None, BatchLimits())
    assert not await batch_pool_due(context(redis), body)  # a DRAFT needs no worker
    await batches.finalize("ep", "batch_a", 2, 1000)
    ctx = context(redis)
    assert await batch_pool_due(ctx, body)
    ctx.batch_pools["u-1"] = (3, None)  # its pool made for this generation
    assert not await batch_pool_due(ctx, body)
    body["metadata"]["generation"] = 4  # a change the pool must follow
    assert await batch_pool_due(ctx, body)
