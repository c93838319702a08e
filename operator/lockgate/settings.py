"""Settings from `LOCKGATE_*` environment variables; every default works on one machine."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from lockgate.models.limits import LimitOverride, Operation
from lockgate.store.connection import RedisSettings

MIB = 1024 * 1024
# The body budget derived from a memory limit: the idle process's share is set apart, and
# each body byte held costs about four bytes at a request's peak (the raw body, its parsed
# objects, the input serialised again and Redis' command buffer).
BASELINE_BYTES = 160 * MIB
COPIES_PER_BODY_BYTE = 4
MIN_BODY_BUDGET = 21 * MIB  # one body of the largest size a route admits (/runsync, 20 MB)
DEFAULT_BODY_BUDGET = 256 * MIB  # no memory limit known


class Settings(RedisSettings):
    """Gateway and store settings (Redis's in `RedisSettings`). Durations carry their unit."""

    model_config = SettingsConfigDict(env_prefix="LOCKGATE_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8080
    base_url: str = Field("", description="public job API base; default http://{host}:{port}")
    worker_port: int = Field(
        0,
        ge=0,
        le=65535,
        description="serve the worker API on this port alone (a NetworkPolicy can then admit "
        "only worker pods to it) and no longer on `port`; 0: both APIs on `port`",
    )

    take_wait_s: float = Field(20.0, description="how long job-take long-polls are held")
    stop_wait_s: float = Field(20.0, description="how long job-stop long-polls are held")
    poll_fallback_s: float = Field(
        2.0, description="waiters re-check Redis this often, in case a wake-up was missed"
    )
    read_concurrency: int = Field(
        2,
        ge=1,
        description="client reads (/status, /stream, /health, /requests) served at once per "
        "process; more wait their turn, so polling clients cannot starve the workers' "
        "requests of the gateway's CPU",
    )
    heartbeat_timeout_s: float = Field(30.0, description="a silent worker is lost after this")
    openai_wait_s: float = Field(
        600.0,
        gt=0,
        description="the longest an OpenAI-route request waits for its answer (for a stream: "
        "for its next chunk); then 504 and its job is cancelled",
    )
    openai_keepalive_s: float = Field(
        10.0, gt=0, description="an OpenAI stream sends a `: keep-alive` comment this often"
    )
    retention_run_s: float = 30 * 60
    retention_sync_s: float = 60
    sweep_interval_s: float = Field(1.0, description="timeouts, ttl and lost workers, this often")
    max_attempts: int = Field(3, description="times a job may be lost with its worker")
    unlisted_grace_s: float = Field(
        10.0, description="a held job a worker's ping does not list is requeued after this"
    )
    webhook_secret: str = Field("", description="Standard Webhooks secret (whsec_… or text)")
    webhook_attempts: int = 3
    webhook_retry_interval_s: float = 10.0
    webhook_timeout_s: float = Field(
        10.0, description="budget of one webhook attempt: lookup, connect, send and answer"
    )
    webhook_lease_margin_s: float = Field(
        20.0,
        gt=0,
        description="a claimed delivery is leased for webhook_timeout_s plus this; if its "
        "gateway dies mid-call, another replica calls again once the lease ends",
    )
    webhook_per_host: int = Field(
        4,
        ge=1,
        description="webhook attempts in flight to one host, per gateway replica; a slow "
        "receiver holds at most this many, and other hosts' deliveries do not wait for it",
    )
    webhook_concurrency: int = Field(
        256, ge=1, description="webhook attempts in flight in all, per gateway replica"
    )
    webhook_host_busy_delay_s: float = Field(
        1.0,
        gt=0,
        description="a due delivery whose host is at webhook_per_host is put back for this "
        "long (the next webhook_per_host put back for twice this, and so on), without "
        "using one of its webhook_attempts",
    )
    webhook_allow_private: bool = Field(
        False, description="allow webhook URLs on loopback, link-local or private addresses"
    )
    worker_address_binding: bool = Field(
        True,
        description="a worker id presented with an endpoint's shared worker key is bound "
        "to the first network address it came from (its pod's IP); the same id from "
        "another address gets 403. Turn off when one worker's calls reach the gateway "
        "from changing addresses (several NAT egress IPs, a proxy per connection)",
    )
    worker_binding_ttl_s: float = Field(
        600.0, gt=0, description="a worker id's address binding ends this long after its last use"
    )
    auth: bool = Field(
        True, description="false: no key is asked for (benchmarks only; never in production)"
    )
    auth_cache_s: float = Field(
        5.0, description="how long a key lookup is cached in-process; bounds a revocation"
    )
    keys_file: str = Field(
        "", description="JSON list of {name, sha256, scopes, endpoints?} (a mounted Secret)"
    )
    keys_file_reload_s: float = Field(5.0, description="how often the key file is looked at")
    rate_limited: bool = Field(True, description="false: no rate or concurrency limit")
    rate_limit_window_s: float = Field(10.0, description="the spec's counting window")
    rate_limits: dict[Operation, LimitOverride] = Field(
        default_factory=dict,
        description='per-operation overrides of the spec\'s table, e.g. {"status": {"rate": '
        '5000, "concurrency": 0, "requests_per_worker": 100}} (0: no limit)',
    )
    workers_cache_s: float = Field(
        1.0, description="how long the running-worker count of the dynamic rule is cached"
    )
    registry_cache_s: float = Field(2.0, description="how long an endpoint entry is cached")
    max_result_bytes: int = Field(
        20 * 1024 * 1024, description="largest job-done or job-stream body a worker may post"
    )
    max_stream_bytes: int = Field(
        64 * 1024 * 1024,
        description="stream data kept per job until /stream reads it; a worker posting "
        "past it gets 413",
    )
    cors_allow_origins: list[str] = Field(
        default_factory=list,
        description="origins whose browser pages may call the job API (CORS), a JSON list: "
        '["https://app.example.com"], or ["*"] for any; empty: none (no CORS headers)',
    )
    metrics_token: str = Field(
        "", description="when set, /metrics requires `Authorization: Bearer <token>`"
    )

    # Resources: memory, Redis and connections (docs/operations.md, "Gateway resources").
    memory_limit_bytes: int = Field(
        0,
        ge=0,
        description="the gateway container's memory limit (the chart passes "
        "resources.limits.memory); sizes the default body budget. 0: unknown",
    )
    body_budget_bytes: int = Field(
        0,
        ge=0,
        description="bytes of request bodies and taken job inputs held at once, gateway-wide; "
        "a request past it gets 503 with Retry-After. 0: derived from memory_limit_bytes",
    )
    batch_take_bytes: int = Field(
        32 * MIB,
        gt=0,
        description="a job-take-batch answer takes no more jobs once their inputs reach this",
    )
    max_queued_jobs: int = Field(
        100_000, ge=0, description="jobs one endpoint may have queued; past it /run gets 429"
    )
    max_queued_bytes: int = Field(
        256 * MIB,
        ge=0,
        description="bytes of input one endpoint may have queued; past it /run gets 429",
    )
    batch_max_active: int = Field(
        10, ge=1, description="Batch Jobs: batches not yet done per endpoint; past it 429"
    )
    batch_max_requests: int = Field(
        5_000, ge=1, description="Batch Jobs: requests per batch; past it 400"
    )
    batch_max_queued: int = Field(
        50_000,
        ge=1,
        description="Batch Jobs: requests of an endpoint's finalized batches not yet ended; "
        "a finalize past it gets 429",
    )
    batch_max_bytes: int = Field(
        256 * MIB, ge=1, description="Batch Jobs: bytes of request JSON per batch; past it 413"
    )
    batch_retention_s: float = Field(
        7 * 24 * 3600.0, gt=0, description="Batch Jobs: how long a done batch and its results stay"
    )
    batch_interval_s: float = Field(
        1.0,
        gt=0,
        description="Batch Jobs: how often each gateway queues, tracks and ends the running "
        "batches' requests",
    )
    lb_hold_s: float = Field(
        120.0, ge=0, description="LB: how long a request waits for a routable worker (else 503)"
    )
    lb_domain: str = Field(
        "", description="LB: requests to Host {endpoint_id}.<this> reach the endpoint's workers"
    )
    lb_max_held: int = Field(
        1000, ge=0, description="LB: requests held per endpoint and process; 503 beyond"
    )
    lb_health_fast_s: float = Field(
        0.1, gt=0, le=0.25, description="LB: health poll interval while a worker starts"
    )
    lb_health_calm_s: float = Field(
        2.0, gt=0, description="LB: health poll interval once a worker is healthy"
    )
    lb_ws_heartbeat_s: float = Field(
        30.0,
        gt=0,
        description="LB: a relayed WebSocket's client is pinged this often and dropped when "
        "its pong is not back within half of it",
    )
    header_timeout_s: float = Field(
        10.0, gt=0, description="a new connection must send a whole request head within this"
    )
    body_timeout_s: float = Field(
        60.0, gt=0, description="a request body must arrive whole within this (else 408)"
    )
    idle_timeout_s: float = Field(
        75.0,
        gt=0,
        description="an idle keep-alive connection is closed after this (keep it above a "
        "load balancer's idle timeout, e.g. 60 s)",
    )

    @model_validator(mode="after")
    def _body_budget_fits_a_body(self) -> Settings:
        if self.body_budget_bytes and self.body_budget_bytes < MIN_BODY_BUDGET:
            raise ValueError(
                f"body_budget_bytes must be 0 (derived) or at least {MIN_BODY_BUDGET} "
                "(one body of the largest size a route admits)"
            )
        return self

    @model_validator(mode="after")
    def _worker_port_apart(self) -> Settings:
        if self.worker_port and self.worker_port == self.port:
            raise ValueError("worker_port must differ from port (or be 0: both APIs on port)")
        return self

    def body_budget(self) -> int:
        """The body budget in bytes: as set, else derived from the memory limit."""
        if self.body_budget_bytes:
            return self.body_budget_bytes
        if not self.memory_limit_bytes:
            return DEFAULT_BODY_BUDGET
        spare = (self.memory_limit_bytes - BASELINE_BYTES) // COPIES_PER_BODY_BYTE
        return max(MIN_BODY_BUDGET, spare)

    def public_base_url(self) -> str:
        return self.base_url.rstrip("/") or f"http://{self.host}:{self.port}"


class Prices(BaseSettings):
    """What an hour of a resource costs, for `/v2/billing/serverless`'s amounts; unset: 0
    (`LOCKGATE_GPU_PRICES='{"NVIDIA L4": 0.44}'`, `LOCKGATE_VCPU_PRICE=0.02`). Any
    currency: the amounts are in the one the prices are in."""

    model_config = SettingsConfigDict(env_prefix="LOCKGATE_", extra="ignore")

    gpu_prices: dict[str, Annotated[float, Field(ge=0)]] = Field(
        default_factory=dict,
        description="GPU type id (as in gpuTypeIds) -> price of one GPU for an hour",
    )
    vcpu_price: NonNegativeFloat = Field(
        0.0, description="price of one vCPU for an hour (CPU endpoints)"
    )


class CatalogueEntry(BaseModel):
    """A ready-to-deploy repository the console offers on its Create page."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(..., min_length=1, max_length=2048, description="the repository's URL")
    ref: str = Field("", max_length=255, description="branch, tag or commit; empty: its HEAD")
    title: str = Field("", max_length=200, description="what the list shows; empty: the URL")


class ConsoleSettings(BaseSettings):
    """What the console offers besides the API: `LOCKGATE_CONSOLE_CATALOGUE`, a JSON list
    of `{url, ref, title}` (the chart's `operator.manage.console.catalogue`; `lockgate dev`
    reads the same variable). Empty by default."""

    model_config = SettingsConfigDict(env_prefix="LOCKGATE_CONSOLE_", extra="ignore")

    catalogue: list[CatalogueEntry] = Field(
        default_factory=list, max_length=500, description="ready-to-deploy repositories"
    )


def catalogue_of(settings: ConsoleSettings) -> tuple[dict[str, str], ...]:
    """The catalogue as `/v1/about` shows it."""
    return tuple(entry.model_dump() for entry in settings.catalogue)
