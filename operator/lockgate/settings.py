"""Settings from `LOCKGATE_*` environment variables; every default works on one machine."""

from __future__ import annotations

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from lockgate.models.limits import LimitOverride, Operation


class Settings(BaseSettings):
    """Gateway and store settings. Durations carry their unit in the name."""

    model_config = SettingsConfigDict(env_prefix="LOCKGATE_", extra="ignore")

    redis_url: str = "redis://127.0.0.1:6379/0"
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
    heartbeat_timeout_s: float = Field(30.0, description="a silent worker is lost after this")
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

    @model_validator(mode="after")
    def _worker_port_apart(self) -> Settings:
        if self.worker_port and self.worker_port == self.port:
            raise ValueError("worker_port must differ from port (or be 0: both APIs on port)")
        return self

    def public_base_url(self) -> str:
        return self.base_url.rstrip("/") or f"http://{self.host}:{self.port}"
