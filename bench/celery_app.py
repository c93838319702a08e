"""The Celery peer's app and its no-op task, for `make bench` (bench/celery_peer.py).

Broker and result backend are the Redis at `$BENCH_CELERY_REDIS`. Like the lockgate
worker's no-op handler, the task appends each id it runs to `$BENCH_IDS_DIR/<pid>.ids`
(one per line, before it returns), so the bench can tell a lost job from one run twice.
"""

import os

from celery import Celery

_REDIS = os.environ.get("BENCH_CELERY_REDIS", "redis://127.0.0.1:6379/0")
_DIR = os.environ.get("BENCH_IDS_DIR")

app = Celery("bench", broker=_REDIS, backend=_REDIS)
app.conf.update(
    worker_disable_rate_limits=True,  # rate limits off, as for lockgate
    broker_pool_limit=64,  # up to 32 client threads share the producer pool
    broker_connection_retry_on_startup=True,
    task_serializer="json",
    result_serializer="json",
    worker_hijack_root_logger=False,
)
_ids = None


@app.task(name="bench.noop")
def noop() -> dict:
    """Return `{"ok": true}`; note the task id first."""
    global _ids
    if _DIR and _ids is None:  # opened in each prefork child, after the fork
        _ids = open(os.path.join(_DIR, f"{os.getpid()}.ids"), "a", buffering=1)  # noqa: SIM115
    if _ids is not None:
        _ids.write(noop.request.id + "\n")
    return {"ok": True}
