"""Background work every gateway replica runs: the sweeper and webhook deliveries.

Both are safe to run in many replicas at once: a sweep takes a per-endpoint lock in
Redis, and each webhook attempt is leased to the one replica that claimed it, for
`webhook_timeout_s + webhook_lease_margin_s`: the attempt is settled before the lease
ends, unless its replica died, and then another replica makes the next attempt.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

import aiohttp
import orjson
from aiohttp.abc import AbstractResolver
from aiohttp.resolver import ThreadedResolver

from lockgate.gateway.ssrf import PrivateDestination, PublicOnlyResolver, private_literal
from lockgate.gateway.state import Gateway
from lockgate.gateway.views import job_body
from lockgate.gateway.warmup import sweep_warmups
from lockgate.signing import signature_headers
from lockgate.store import Delivery, JobNotFound
from lockgate.store.connection import raise_if_cancelled

log = logging.getLogger("lockgate.gateway")

# Outcomes of one webhook attempt, as counted in lockgate_webhook_deliveries_total.
DELIVERED, RETRYING, GAVE_UP, REFUSED, EXPIRED = (
    "delivered", "retrying", "gave_up", "refused", "expired"
)  # fmt: skip


async def _every(interval_s: float, work: Callable[[], Awaitable[object]], name: str) -> None:
    """Run `work()` every `interval_s`, surviving errors (Redis restarts, …)."""
    while True:
        try:
            await work()
        except asyncio.CancelledError:
            raise
        except Exception as err:
            log.warning("%s failed: %s", name, err)
        raise_if_cancelled()
        await asyncio.sleep(interval_s)


async def sweep_all(gw: Gateway) -> None:
    """One sweep of every endpoint to look after (`Activity`: the active ones, or all of
    them on a full pass)."""
    lock_ms = max(100, int(gw.settings.sweep_interval_s * 900))
    horizon_ms = gw.activity.horizon_ms(gw.settings.sweep_interval_s)
    for endpoint_id in await gw.activity.to_sweep(gw.registry):
        generation = gw.activity.generation(endpoint_id)
        done = await gw.store.sweep(endpoint_id, lock_ms=lock_ms, horizon_ms=horizon_ms)
        gw.activity.swept(endpoint_id, quiet=done.quiet, generation=generation)
        await sweep_warmups(gw, endpoint_id)
        if done.timed_out or done.expired or done.lost_workers:
            log.info(
                "sweep %s: %d timed out, %d expired, %d lost worker(s), %d job(s) requeued",
                endpoint_id, done.timed_out, done.expired, done.lost_workers, done.requeued,
            )  # fmt: skip


class HostSlots:
    """Webhook attempts in flight, at most `per_host` to one host and `total` in all."""

    def __init__(self, *, per_host: int, total: int) -> None:
        self.per_host = per_host
        self.total = total
        self.busy: dict[str, int] = {}

    def free(self) -> int:
        """How many more attempts may start (to hosts below their cap)."""
        return max(0, self.total - sum(self.busy.values()))

    def take(self, host: str) -> bool:
        """Start an attempt to `host`, unless it or the whole sender is at its cap."""
        if self.free() == 0 or self.busy.get(host, 0) >= self.per_host:
            return False
        self.busy[host] = self.busy.get(host, 0) + 1
        return True

    def give(self, host: str) -> None:
        """An attempt to `host` ended."""
        left = self.busy.pop(host) - 1
        if left:
            self.busy[host] = left


def host_of(url: str) -> str:
    """What deliveries are capped by: the URL's host name (ports of one host share it)."""
    return (urlsplit(url).hostname or "").lower()


class WebhookSender:
    """Delivers the outbox: POST the job's /status body, signed, with retries.

    Each claimed delivery runs as its own task, so one round of claims never waits for a
    slow receiver; `HostSlots` keeps a receiver that never answers to `webhook_per_host`
    attempts at once, each bounded by `webhook_timeout_s`, and puts back (without using an
    attempt) what its host has no slot for."""

    def __init__(self, gw: Gateway, session: aiohttp.ClientSession) -> None:
        self.gw = gw
        self.session = session
        self.settings = gw.settings
        self.slots = HostSlots(
            per_host=self.settings.webhook_per_host, total=self.settings.webhook_concurrency
        )
        self.tasks: set[asyncio.Task[None]] = set()

    async def deliver_all(self) -> None:
        """Claim what is due and start each attempt its host has a slot for."""
        lease_s = self.settings.webhook_timeout_s + self.settings.webhook_lease_margin_s
        lease_ms = int(lease_s * 1000)
        deferred: dict[str, int] = {}  # per busy host, deliveries put back this round
        for endpoint_id in sorted(self.gw.activity.active):  # a pending webhook keeps it so
            if not (free := self.slots.free()):
                return
            claimed = await self.gw.store.claim_webhooks(endpoint_id, lease_ms=lease_ms, limit=free)
            for delivery in claimed:
                host = host_of(delivery.url)
                if self.slots.take(host):
                    self._start(endpoint_id, delivery, host)
                    continue
                deferred[host] = nth = deferred.get(host, -1) + 1
                await self.gw.store.settle_webhook(
                    endpoint_id, delivery.job_id, done=False, retry_in_ms=self._busy_ms(nth),
                    attempted=False,
                )  # fmt: skip

    def _busy_ms(self, nth: int) -> int:
        """When the `nth` (from 0) delivery put back for one busy host is due again: in
        groups of `webhook_per_host`, one `webhook_host_busy_delay_s` apart, so a backlog
        for a receiver that never answers is claimed about `webhook_per_host` at a time,
        in its order, rather than all of it every round."""
        groups = 1 + nth // self.settings.webhook_per_host
        return int(groups * self.settings.webhook_host_busy_delay_s * 1000)

    def _start(self, endpoint_id: str, delivery: Delivery, host: str) -> None:
        task = asyncio.create_task(self._deliver_in_slot(endpoint_id, delivery, host))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _deliver_in_slot(self, endpoint_id: str, delivery: Delivery, host: str) -> None:
        try:
            await self.deliver(endpoint_id, delivery)
        except Exception as err:  # Redis gone mid-settle: the lease brings it back
            log.warning("webhook for job %s: %s", delivery.job_id, err)
        finally:
            self.slots.give(host)

    async def close(self) -> None:
        """Stop the attempts in flight (their leases bring them back)."""
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def deliver(self, endpoint_id: str, delivery: Delivery) -> None:
        """One attempt; then settle it: done, or due again after the retry interval."""
        outcome = await self._attempt(endpoint_id, delivery)
        ok = outcome != RETRYING
        last = delivery.attempt >= self.settings.webhook_attempts
        if not ok and last:
            outcome = GAVE_UP
            log.warning("webhook for job %s failed %d times; giving up", *_who(delivery))
        self.gw.metrics.webhooks.labels(endpoint_id, outcome).inc()
        retry_ms = int(self.settings.webhook_retry_interval_s * 1000)
        await self.gw.store.settle_webhook(
            endpoint_id, delivery.job_id, done=ok or last, retry_in_ms=retry_ms
        )

    async def _attempt(self, endpoint_id: str, delivery: Delivery) -> str:
        """POST once; the outcome (a `lockgate_webhook_deliveries_total` label)."""
        try:
            record = await self.gw.store.get(endpoint_id, delivery.job_id)
        except JobNotFound:
            return EXPIRED  # expired or deleted meanwhile: nothing left to tell
        if not self.settings.webhook_allow_private and (where := private_literal(delivery.url)):
            return _refused(delivery, f"{where} is private")
        body = orjson.dumps(job_body(record, self.gw.store.clock()))
        headers = {"content-type": "application/json"}
        if self.settings.webhook_secret:
            msg_id = f"{record.id}-{record.finished}"
            headers |= signature_headers(self.settings.webhook_secret, body, msg_id=msg_id)
        # The whole attempt, lookup included (the connector resolves inside the request).
        timeout = aiohttp.ClientTimeout(total=self.settings.webhook_timeout_s)
        try:
            async with self.session.post(
                delivery.url, data=body, headers=headers, timeout=timeout, allow_redirects=False
            ) as response:
                ok = 200 <= response.status < 300
        except aiohttp.ClientConnectorError as err:
            if isinstance(err.os_error, PrivateDestination):
                return _refused(delivery, str(err.os_error))
            log.info("webhook for job %s attempt %d: %s", delivery.job_id, delivery.attempt, err)
            return RETRYING
        except (aiohttp.ClientError, TimeoutError) as err:
            log.info("webhook for job %s attempt %d: %s", delivery.job_id, delivery.attempt, err)
            return RETRYING
        log.info("webhook for job %s attempt %d: HTTP %d", *_who(delivery), response.status)
        return DELIVERED if ok else RETRYING


def _refused(delivery: Delivery, why: str) -> str:
    log.warning("webhook for job %s refused: %s", delivery.job_id, why)
    return REFUSED


def _who(delivery: Delivery) -> tuple[str, int]:
    return delivery.job_id, delivery.attempt


async def run_background(gw: Gateway) -> None:
    """The sweeper and the webhook sender, until cancelled."""
    async with aiohttp.ClientSession(connector=webhook_connector(gw)) as session:
        sender = WebhookSender(gw, session)
        interval = gw.settings.sweep_interval_s
        try:
            await asyncio.gather(
                _every(interval, lambda: sweep_all(gw), "sweep"),
                _every(min(interval, 0.5), sender.deliver_all, "webhook delivery"),
            )
        finally:
            await sender.close()


def webhook_connector(gw: Gateway) -> aiohttp.TCPConnector:
    """The sender's connector: each delivery looks its host up once, through the SSRF
    guard unless `webhook_allow_private`, and connects to what that lookup returned. No
    pool-wide limit: `HostSlots` bounds the attempts in flight (aiohttp's default of 100
    would let one slow host hold every connection)."""
    resolver: AbstractResolver = ThreadedResolver()
    if not gw.settings.webhook_allow_private:
        resolver = PublicOnlyResolver(resolver)
    return aiohttp.TCPConnector(resolver=resolver, use_dns_cache=False, limit=0)
