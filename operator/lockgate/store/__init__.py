"""Redis job store: keys, Lua transition scripts, registry of endpoints and keys."""

from lockgate.store.connection import UNAVAILABLE, connect
from lockgate.store.jobs import (
    STOPPING,
    WARMING,
    Delivery,
    IneligibleState,
    JobNotFound,
    JobQuery,
    JobStore,
    Liveness,
    NewJob,
    QueueFull,
    QueueQuota,
    Retention,
    Sampled,
    StreamFull,
    Sweep,
    now_ms,
)
from lockgate.store.records import Attempt, Finished, JobExtras, JobRecord, Snapshot, TakenJob
from lockgate.store.registry import Registry, key_digest, key_id
from lockgate.store.scripts import Replication

__all__ = [
    "STOPPING",
    "UNAVAILABLE",
    "WARMING",
    "Attempt",
    "Delivery",
    "Finished",
    "IneligibleState",
    "JobExtras",
    "JobNotFound",
    "JobQuery",
    "JobRecord",
    "JobStore",
    "Liveness",
    "NewJob",
    "QueueFull",
    "QueueQuota",
    "Registry",
    "Replication",
    "Retention",
    "Sampled",
    "Snapshot",
    "StreamFull",
    "Sweep",
    "TakenJob",
    "connect",
    "key_digest",
    "key_id",
    "now_ms",
]
