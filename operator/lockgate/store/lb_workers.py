"""Load-balancing workers in Redis: where each one listens, its polled health, and the
requests every gateway process holds or has in flight (keys `lbw`, `lbh`, `lbr`); the
workers a scale-down parked (`lbp`: resumable until a deadline) and those a `strict-resume`
request asked back (`lbpw`).

Whoever runs the workers (dev mode's pool, the operator's `kube.lb_pods`) registers them; every
gateway reads them, polls their health and reports what it saw. The gateway never needs
the Kubernetes API to find a worker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import orjson
from redis.asyncio import Redis
from redis.typing import EncodableT, FieldT

from lockgate.store import keys
from lockgate.store.replies import text

HEALTHY, INITIALIZING, UNHEALTHY = "healthy", "initializing", "unhealthy"
WARMED, FAILED, WARMING = "done", "failed", "warming"  # a worker's warm-up in `lbu`

# Claim a worker's warm-up (KEYS[1] `lbu`; ARGV worker, now ms, until ms): set "warming
# <until>" when no warm-up began or the one that did is past its deadline. Returns 1 when
# claimed.
_CLAIM_WARMUP = """
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v then
  local until_ms = string.match(v, '^warming (%d+)$')
  if not until_ms or tonumber(until_ms) >= tonumber(ARGV[2]) then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[1], 'warming ' .. ARGV[3])
return 1
"""


@dataclass(frozen=True, slots=True)
class LbWorker:
    """One registered worker: its HTTP server and health check, and whether it is leaving."""

    address: str  # host:port of the worker's HTTP server (`PORT`)
    health: str  # host:port of its health check (`PORT_HEALTH`)
    path: str = "/ping"  # `HEALTH_CHECK_PATH`
    draining: bool = False  # taken out of routing: its in-flight requests finish, no new one

    def to_json(self) -> bytes:
        body = {"address": self.address, "health": self.health, "path": self.path}
        return orjson.dumps({**body, "draining": self.draining})

    @classmethod
    def from_json(cls, raw: bytes | str) -> LbWorker:
        d = orjson.loads(raw)
        return cls(str(d["address"]), str(d["health"]), str(d["path"]), bool(d["draining"]))


@dataclass(frozen=True, slots=True)
class Health:
    """A worker's health as a gateway last polled it; `code` 0: it did not answer."""

    state: str
    code: int
    at_ms: int


@dataclass(frozen=True, slots=True)
class Parked:
    """A worker a scale-down parked: its record (as it was routed) and until when (epoch
    ms) it can be resumed; after that it is gone."""

    worker: LbWorker
    until_ms: int

    def to_json(self) -> bytes:
        return orjson.dumps({"worker": orjson.loads(self.worker.to_json()), "until": self.until_ms})

    @classmethod
    def from_json(cls, raw: bytes | str) -> Parked:
        d = orjson.loads(raw)
        return cls(LbWorker.from_json(orjson.dumps(d["worker"])), int(d["until"]))


@dataclass(frozen=True, slots=True)
class Roster:
    """An endpoint's registered workers and its parked ones, read together."""

    workers: dict[str, LbWorker]
    parked: dict[str, Parked]


class LbWorkers:
    """Reads and writes the load-balancing worker records of every endpoint."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._claim = redis.register_script(_CLAIM_WARMUP)

    async def register(self, endpoint_id: str, worker_id: str, worker: LbWorker) -> None:
        """Add (or replace) a worker; gateways learn of it at once (`l:` event)."""
        await self.redis.hset(keys.lb_workers(endpoint_id), worker_id, worker.to_json())
        await self._changed(endpoint_id)

    async def unregister(self, endpoint_id: str, worker_id: str) -> None:
        """Forget a worker and its health (parked or not)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hdel(keys.lb_workers(endpoint_id), worker_id)
        pipe.hdel(keys.lb_health(endpoint_id), worker_id)
        pipe.hdel(keys.lb_warmups(endpoint_id), worker_id)
        pipe.hdel(keys.lb_parked(endpoint_id), worker_id)
        await pipe.execute()
        await self._changed(endpoint_id)

    async def park(self, endpoint_id: str, worker_id: str, parked: Parked) -> None:
        """Move a drained worker out of `lbw` into `lbp` (out of routing and of the worker
        counts; a `strict-resume` request can still ask it back until `parked.until_ms`)."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.hdel(keys.lb_workers(endpoint_id), worker_id)
        pipe.hdel(keys.lb_health(endpoint_id), worker_id)
        pipe.hset(keys.lb_parked(endpoint_id), worker_id, parked.to_json())
        await pipe.execute()
        await self._changed(endpoint_id)

    async def unpark(self, endpoint_id: str, worker_id: str, worker: LbWorker) -> None:
        """A parked worker back in `lbw` as `worker` (gateways poll it and route on 200)."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.hdel(keys.lb_parked(endpoint_id), worker_id)
        pipe.hset(keys.lb_workers(endpoint_id), worker_id, worker.to_json())
        await pipe.execute()
        await self._changed(endpoint_id)

    async def forget_parked(self, endpoint_id: str, worker_ids: Sequence[str]) -> None:
        """Parked workers that can no longer be resumed (their window passed, a new release
        replaced them): a `strict-resume` request for them is 404 from now on."""
        if worker_ids:
            await self.redis.hdel(keys.lb_parked(endpoint_id), *worker_ids)
            await self._changed(endpoint_id)

    async def roster(self, endpoint_id: str) -> Roster:
        """The registered workers and the parked ones, in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(keys.lb_workers(endpoint_id))
        pipe.hgetall(keys.lb_parked(endpoint_id))
        workers, parked = await pipe.execute()
        return Roster(
            {text(w): LbWorker.from_json(v) for w, v in workers.items()},
            {text(w): Parked.from_json(v) for w, v in parked.items()},
        )

    async def ask_resume(self, endpoint_id: str, worker_id: str) -> None:
        """A `strict-resume` request wants a parked (or draining) worker back: noted for
        whoever runs the workers, whose scaler is woken (`q:` event) to act at once."""
        await self.redis.sadd(keys.lb_resume(endpoint_id), worker_id)
        await self.wake_scaler(endpoint_id)

    async def take_resumes(self, endpoint_id: str) -> list[str]:
        """The worker ids asked back since the last call (each returned once)."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.smembers(keys.lb_resume(endpoint_id))
        pipe.delete(keys.lb_resume(endpoint_id))
        asked, _ = await pipe.execute()
        return sorted(text(w) for w in asked)

    async def apply(
        self,
        endpoint_id: str,
        register: Mapping[str, LbWorker],
        unregister: Sequence[str] = (),
    ) -> None:
        """Several registrations and removals in one pipeline and one `l:` event (the
        operator's pod sync); nothing to do: no Redis call."""
        if not register and not unregister:
            return
        pipe = self.redis.pipeline(transaction=False)
        if register:
            values: dict[FieldT, EncodableT] = {w: j.to_json() for w, j in register.items()}
            pipe.hset(keys.lb_workers(endpoint_id), mapping=values)
        if unregister:
            pipe.hdel(keys.lb_workers(endpoint_id), *unregister)
            pipe.hdel(keys.lb_health(endpoint_id), *unregister)
            pipe.hdel(keys.lb_warmups(endpoint_id), *unregister)
        await pipe.execute()
        await self._changed(endpoint_id)

    async def workers(self, endpoint_id: str) -> dict[str, LbWorker]:
        """Every registered worker of the endpoint, by id."""
        raw = await self.redis.hgetall(keys.lb_workers(endpoint_id))
        return {text(w): LbWorker.from_json(v) for w, v in raw.items()}

    async def report_health(
        self, endpoint_id: str, worker_id: str, state: str, code: int, now_ms: int
    ) -> None:
        """What a health poll saw (for `/health` and the scaler's worker counts)."""
        value = f"{state} {code} {now_ms}"
        await self.redis.hset(keys.lb_health(endpoint_id), worker_id, value)

    async def health(self, endpoint_id: str) -> dict[str, Health]:
        """The last polled health of each registered worker (absent: never polled)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hkeys(keys.lb_workers(endpoint_id))
        pipe.hgetall(keys.lb_health(endpoint_id))
        registered, raw = await pipe.execute()
        names = {w.decode() for w in registered}
        found = {}
        for w, v in raw.items():
            state, code, at = v.decode().split(" ")
            if w.decode() in names:
                found[w.decode()] = Health(state, int(code), int(at))
        return found

    async def report_requests(
        self,
        endpoint_id: str,
        reporter: str,
        *,
        held: int,
        in_flight: Mapping[str, int],
        now_ms: int,
    ) -> None:
        """One gateway process's held and in-flight requests (per worker); it counts for
        `LB_REQUESTS_TTL_MS` unless written again; nothing held or in flight removes it."""
        key = keys.lb_requests(endpoint_id)
        flight = {w: n for w, n in in_flight.items() if n > 0}
        if not held and not flight:
            await self.redis.hdel(key, reporter)
            return
        exp = now_ms + keys.LB_REQUESTS_TTL_MS
        await self.redis.hset(
            key, reporter, orjson.dumps({"held": held, "flight": flight, "exp": exp})
        )

    async def forget_reports(self, endpoint_id: str, now_ms: int) -> None:
        """Drop expired request reports (of gateway processes that went away)."""
        key = keys.lb_requests(endpoint_id)
        raw = await self.redis.hgetall(key)
        dead = [r for r, v in raw.items() if int(orjson.loads(v)["exp"]) < now_ms]
        if dead:
            await self.redis.hdel(key, *dead)

    # -- warm-up (`lbu`): one gateway process sends a new worker its warm-up request --

    async def warmup_state(self, endpoint_id: str, worker_id: str) -> str | None:
        """The worker's warm-up: WARMED, "failed <reason>", "warming <deadline ms>", or
        None when none began."""
        raw = await self.redis.hget(keys.lb_warmups(endpoint_id), worker_id)
        return None if raw is None else text(raw)

    async def claim_warmup(
        self, endpoint_id: str, worker_id: str, *, now_ms: int, until_ms: int
    ) -> bool:
        """Whether this caller sends the worker its warm-up request: none began, or the
        one that did is past its deadline (its gateway process went away)."""
        claimed = await self._claim(
            keys=[keys.lb_warmups(endpoint_id)], args=[worker_id, now_ms, until_ms]
        )
        return bool(claimed)

    async def warmup_ended(self, endpoint_id: str, worker_id: str, failure: str | None) -> None:
        """Record the warm-up's outcome: WARMED, or `failure` (the worker's marked unhealthy
        apart, `JobStore.mark_unhealthy`)."""
        value = WARMED if failure is None else f"{FAILED} {failure}"
        await self.redis.hset(keys.lb_warmups(endpoint_id), worker_id, value)

    async def wake_scaler(self, endpoint_id: str) -> None:
        """The `q:` event a queued job sends: scalers decide at once, not at their next tick."""
        await self.redis.publish(keys.EVENTS_CHANNEL, f"q:{endpoint_id}")

    async def _changed(self, endpoint_id: str) -> None:
        await self.redis.publish(keys.EVENTS_CHANNEL, f"l:{endpoint_id}")
