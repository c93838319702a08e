"""lockgate on a real Redis Cluster (3 masters + 3 replicas on loopback): the job API's
contract tests re-run on it, endpoints on different masters, and faults under load."""

from __future__ import annotations

import pytest
from redis.crc import key_slot

from lockgate.store import keys
from lockgate.store.connection import RedisSettings
from tests.conftest import redis_settings
from tests.redis_topologies import RedisClusterProcs
from tests.test_idempotency import (  # noqa: F401
    test_a_second_run_with_the_same_key_returns_the_first_job,
    test_deleting_an_endpoints_data_removes_its_idempotency_keys,
)
from tests.test_job_api import (  # noqa: F401 (each one re-run on the cluster)
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
from tests.test_lifecycle import (  # noqa: F401
    GATEWAY_SETTINGS,
    test_a_job_is_gone_when_its_ttl_elapses_even_while_running,
    test_a_job_past_its_execution_timeout_is_timed_out_and_its_worker_told,
    test_a_job_the_workers_ping_does_not_list_goes_back_to_the_queue,
    test_a_silent_worker_loses_its_job_to_the_queue_then_it_fails,
    test_a_webhook_that_fails_twice_is_called_exactly_three_times_signed,
    test_results_are_kept_for_the_retention_then_gone_and_not_retryable,
)
from tests.test_limits import (  # noqa: F401
    test_limits_count_per_key_owner_and_per_endpoint,
    test_rate_limits_can_be_switched_off,
    test_replicas_are_never_granted_more_than_the_rate_together,
    test_requests_in_flight_past_the_concurrency_limit_are_refused,
    test_slots_of_a_replica_that_stops_renewing_are_freed_when_its_lease_ends,
)
from tests.test_progress import (  # noqa: F401
    test_the_latest_progress_is_the_output_of_a_running_job,
)
from tests.test_requests_list import (  # noqa: F401
    test_cancel_retry_and_a_lost_worker_move_jobs_between_status_filters,
    test_jobs_are_listed_newest_first_with_their_state_and_nothing_private,
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


def endpoints_on_masters(cluster: RedisClusterProcs, count: int) -> list[str]:
    """`count` endpoint ids whose key slots are served by different masters."""
    found: dict[int, str] = {}
    for n in range(10_000):
        endpoint = f"ep-{n}"
        master = cluster.master_of_slot(key_slot(keys.prefix(endpoint).encode())).port
        found.setdefault(master, endpoint)
        if len(found) == count:
            return list(found.values())
    raise AssertionError(f"fewer than {count} masters serve slots")
