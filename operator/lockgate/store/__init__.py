"""Redis job store: keys, Lua transition scripts, registry of endpoints and keys."""

from lockgate.store.connection import connect
from lockgate.store.jobs import IneligibleState, JobNotFound, JobStore, NewJob, Retention, now_ms
from lockgate.store.records import JobRecord, Snapshot, TakenJob
from lockgate.store.registry import Registry, key_digest

__all__ = [
    "IneligibleState",
    "JobNotFound",
    "JobRecord",
    "JobStore",
    "NewJob",
    "Registry",
    "Retention",
    "Snapshot",
    "TakenJob",
    "connect",
    "key_digest",
    "now_ms",
]
