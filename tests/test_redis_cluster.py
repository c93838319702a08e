"""lockgate on a real Redis Cluster (3 masters + 3 replicas on loopback): the job API's
contract tests re-run on it, endpoints on different masters, and faults under load."""

from __future__ import annotations

import pytest

from lockgate.store.connection import RedisSettings
from tests.conftest import redis_settings
from tests.redis_topologies import RedisClusterProcs
from tests.test_job_api import (  # noqa: F401 (re-run on the cluster)
    test_a_taken_job_completes_with_its_output,
    test_a_worker_told_to_stop_gets_no_new_job_until_resumed,
    test_cancel_in_progress_signals_the_worker_and_ignores_its_late_result,
    test_cancel_removes_a_queued_job_before_it_starts,
    test_health_counts_jobs_and_workers,
    test_job_take_long_polls_until_a_job_arrives,
    test_purge_removes_queued_jobs_and_leaves_running_ones,
    test_retry_requeues_a_failed_job_with_the_same_id_and_input,
    test_run_queues_a_job_and_status_reports_it,
    test_runsync_returns_the_completed_job,
    test_status_ttl_shortens_a_jobs_life,
    test_stream_returns_chunks_once_and_ends_with_a_final_empty_read,
)
from tests.test_scripts import (  # noqa: F401
    test_an_error_in_one_call_fails_that_call_alone,
    test_concurrent_calls_each_get_their_own_reply,
    test_scripts_flushed_from_redis_are_loaded_again,
)

pytest_plugins = ["redis_topologies"]


@pytest.fixture
def redis_target(redis_cluster: RedisClusterProcs) -> RedisSettings:
    """Every test here runs on the cluster."""
    return redis_settings(redis_cluster_nodes=redis_cluster.startup_nodes)
