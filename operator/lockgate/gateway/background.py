"""Background work every gateway replica runs: the sweeper and webhook deliveries.

Both are safe to run in many replicas at once: a sweep takes a per-endpoint lock in
Redis, and each webhook attempt is leased to the one replica that claimed it, for
`webhook_timeout_s + webhook_lease_margin_s`: the attempt is settled before the lease
ends, unless its replica died, and then another replica makes the next attempt.
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import orjson

from lockgate.gateway.ssrf import private_destination
from lockgate.gateway.state import Gateway
from lockgate.gateway.views import job_body
from lockgate.signing import signature_headers
from lockgate.store import Delivery, JobNotFound

log = logging.getLogger("lockgate.gateway")

# Outcomes of one webhook attempt, as counted in lockgate_webhook_deliveries_total.
DELIVERED, RETRYING, GAVE_UP, REFUSED, EXPIRED = (
    "delivered", "retrying", "gave_up", "refused", "expired"
)  # fmt: skip


async def _every(interval_s: float, work, name: str) -> None:
    """Run `work()` every `interval_s`, surviving errors (Redis restarts, …)."""
    while True:
        try:
            await work()
        except asyncio.CancelledError:
            raise
        except Exception as err:
            log.warning("%s failed: %s", name, err)
        await asyncio.sleep(interval_s)


async def sweep_all(gw: Gateway) -> None:
    """One sweep of every registered endpoint."""
    lock_ms = max(100, int(gw.settings.sweep_interval_s * 900))
    for endpoint_id in await gw.registry.list_endpoints():
        done = await gw.store.sweep(endpoint_id, lock_ms=lock_ms)
        if done.timed_out or done.expired or done.lost_workers:
            log.info(
                "sweep %s: %d timed out, %d expired, %d lost worker(s), %d job(s) requeued",
                endpoint_id, done.timed_out, done.expired, done.lost_workers, done.requeued,
            )  # fmt: skip


class WebhookSender:
    """Delivers the outbox: POST the job's /status body, signed, with retries."""

    def __init__(self, gw: Gateway, session: aiohttp.ClientSession) -> None:
        self.gw = gw
        self.session = session
        self.settings = gw.settings

    async def deliver_all(self) -> None:
        lease_s = self.settings.webhook_timeout_s + self.settings.webhook_lease_margin_s
        lease_ms = int(lease_s * 1000)
        for endpoint_id in await self.gw.registry.list_endpoints():
            claimed = await self.gw.store.claim_webhooks(endpoint_id, lease_ms=lease_ms)
            await asyncio.gather(*(self.deliver(endpoint_id, d) for d in claimed))

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
        if not self.settings.webhook_allow_private and (
            where := await private_destination(delivery.url)
        ):
            log.warning("webhook for job %s refused: %s is private", delivery.job_id, where)
            return REFUSED
        body = orjson.dumps(job_body(record, self.gw.store.clock()))
        headers = {"content-type": "application/json"}
        if self.settings.webhook_secret:
            msg_id = f"{record.id}-{record.finished}"
            headers |= signature_headers(self.settings.webhook_secret, body, msg_id=msg_id)
        timeout = aiohttp.ClientTimeout(total=self.settings.webhook_timeout_s)
        try:
            async with self.session.post(
                delivery.url, data=body, headers=headers, timeout=timeout, allow_redirects=False
            ) as response:
                ok = 200 <= response.status < 300
        except (aiohttp.ClientError, TimeoutError) as err:
            log.info("webhook for job %s attempt %d: %s", delivery.job_id, delivery.attempt, err)
            return RETRYING
        log.info("webhook for job %s attempt %d: HTTP %d", *_who(delivery), response.status)
        return DELIVERED if ok else RETRYING


def _who(delivery: Delivery) -> tuple[str, int]:
    return delivery.job_id, delivery.attempt


async def run_background(gw: Gateway) -> None:
    """The sweeper and the webhook sender, until cancelled."""
    async with aiohttp.ClientSession() as session:
        sender = WebhookSender(gw, session)
        interval = gw.settings.sweep_interval_s
        await asyncio.gather(
            _every(interval, lambda: sweep_all(gw), "sweep"),
            _every(min(interval, 0.5), sender.deliver_all, "webhook delivery"),
        )
