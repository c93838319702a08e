"""`lockgate dev` end to end, as a user runs it: a child process driven over HTTP."""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
import time

import psutil
import requests

from tests.devproc import REPO, DevProcess

ECHO = str(REPO / "examples/echo/handler.py")
RUNPOD_ECHO = str(REPO / "tests/workers/runpod_echo.py")


def wait_until(check, timeout_s: float = 20, every_s: float = 0.1):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(every_s)
    raise AssertionError("condition not met in time")


def test_dev_prints_the_api_url_key_and_a_curl_line_and_runsync_completes(tmp_path):
    with DevProcess(ECHO, "--api-key", "k-test", data_dir=tmp_path) as dev:
        assert dev.key == "k-test" and dev.endpoint == "echo"
        dev.wait_for(rf"job API http://127.0.0.1:{dev.port}/v2/echo")
        r = requests.post(dev.job_url("runsync"), json={"input": {"x": 1}}, headers=dev.headers())
        assert r.status_code == 200
        body = r.json()
        assert body["status"] == "COMPLETED" and body["output"] == {"echo": {"x": 1}}
        assert requests.get(dev.job_url("health"), headers=dev.headers()).status_code == 200


def test_an_lb_example_gets_its_folders_name_and_a_curl_line_that_answers(tmp_path):
    """Issue 50, item 9: `--worker-command "python examples/loadbalancer/worker.py"` is
    endpoint `loadbalancer` (not `python`), and the banner's curl line is an LB request."""
    command = "python examples/loadbalancer/worker.py"
    args = ("--worker-command", command, "--endpoint-type", "LB", "--api-key", "k-lb")
    with DevProcess(*args, data_dir=tmp_path) as dev:
        assert dev.endpoint == "loadbalancer"
        banner = "\n".join(dev.lines)
        assert f"load balancer http://127.0.0.1:{dev.port}/lb/loadbalancer/" in banner
        assert "job API" not in banner and "/runsync" not in banner
        line = dev.wait_for(r"lockgate dev \| try: curl")
        argv = shlex.split(line.split("try: ", 1)[1])
        assert argv[:3] == ["curl", "-H", "authorization: k-lb"]
        answer = requests.get(argv[3], headers={"authorization": "k-lb"}, timeout=120)
        assert answer.status_code == 200, answer.text  # the worker's /ping, cold start and all


def test_ctrl_c_stops_gateway_workers_and_redis(tmp_path):
    dev = DevProcess(ECHO, "--workers-min", "1", data_dir=tmp_path).start()
    wait_until(dev.workers)
    children = psutil.Process(dev.proc.pid).children(recursive=True)
    assert dev.stop() == 0
    dev.wait_for(r"lockgate dev \| stopped")
    psutil.wait_procs(children, timeout=5)
    assert not [p for p in children if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_ctrl_c_says_what_it_waits_for_and_a_second_ctrl_c_stops_at_once(tmp_path):
    """A slow job in hand: the first Ctrl-C names it and the wait, and stops nothing yet;
    the second kills the worker and stops at once (exit 130, no traceback); the job went
    back to the queue for the next run."""
    dev = DevProcess(ECHO, "--workers-min", "1", "--api-key", "k", data_dir=tmp_path).start()
    job = requests.post(
        dev.job_url("run"), json={"input": {"sleep": 120}}, headers=dev.headers()
    ).json()["id"]

    def in_progress():
        r = requests.get(dev.job_url(f"status/{job}"), headers=dev.headers())
        return r.json()["status"] == "IN_PROGRESS"

    wait_until(in_progress)
    worker = wait_until(dev.workers)[0]
    children = psutil.Process(dev.proc.pid).children(recursive=True)
    dev.proc.send_signal(signal.SIGINT)
    line = dev.wait_for(r"lockgate dev \| stopping:")
    assert "waiting up to 30 s for 1 job in hand; Ctrl-C again to stop now" in line
    assert dev.proc.poll() is None and worker.is_running()  # it waits for the job
    dev.proc.send_signal(signal.SIGINT)
    assert dev.proc.wait(30) == 130
    dev.wait_for(r"lockgate dev \| stopped at once")
    assert not [line for line in dev.lines if "Traceback" in line]
    psutil.wait_procs(children, timeout=5)
    assert not [p for p in children if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    with DevProcess(ECHO, "--workers-max", "0", "--api-key", "k", data_dir=tmp_path) as again:
        r = requests.get(again.job_url(f"status/{job}"), headers=again.headers())
        assert r.json()["status"] == "IN_QUEUE"


def test_per_job_lines_are_logged_at_the_default_level_and_warning_hides_them(tmp_path):
    """As the README says: `job <id> started` and `job <id> completed in N ms` at INFO, the
    default (no LOCKGATE_LOG_LEVEL); LOCKGATE_LOG_LEVEL=WARNING leaves them out."""
    for level, shown in ((None, True), ("WARNING", False)):
        dev = DevProcess(ECHO, "--api-key", "k", data_dir=tmp_path / str(level))
        dev.env.pop("LOCKGATE_LOG_LEVEL")
        if level:
            dev.env["LOCKGATE_LOG_LEVEL"] = level
        with dev:
            r = requests.post(dev.job_url("runsync"), json={"input": {}}, headers=dev.headers())
            job = r.json()["id"]
            assert r.json()["status"] == "COMPLETED"
            if shown:
                dev.wait_for(rf"job {job} started")
                dev.wait_for(rf"job {job} completed in \d+ ms")
        if not shown:
            assert not [line for line in dev.lines if f"job {job}" in line], dev.lines


def test_queued_jobs_survive_a_restart(tmp_path):
    with DevProcess(ECHO, "--workers-max", "0", "--api-key", "k", data_dir=tmp_path) as dev:
        ids = [
            requests.post(
                dev.job_url("run"), json={"input": {"n": n}}, headers=dev.headers()
            ).json()["id"]
            for n in range(3)
        ]
    with DevProcess(ECHO, "--api-key", "k", data_dir=tmp_path) as dev:

        def all_done():
            return all(
                requests.get(dev.job_url(f"status/{i}"), headers=dev.headers()).json()["status"]
                == "COMPLETED"
                for i in ids
            )

        wait_until(all_done)


def test_a_killed_worker_loses_no_job(tmp_path):
    with DevProcess(RUNPOD_ECHO, "--workers-max", "1", data_dir=tmp_path) as dev:
        job = requests.post(
            dev.job_url("run"), json={"input": {"sleep": 3}}, headers=dev.headers()
        ).json()

        def in_progress():
            status = requests.get(dev.job_url(f"status/{job['id']}"), headers=dev.headers())
            return status.json()["status"] == "IN_PROGRESS"

        wait_until(in_progress)
        [victim] = dev.workers()
        victim.kill()
        final = wait_until(
            lambda: (
                (
                    s := requests.get(
                        dev.job_url(f"status/{job['id']}"), headers=dev.headers()
                    ).json()
                )["status"]
                == "COMPLETED"
                and s
            ),
            timeout_s=30,
        )
        assert final["output"] == {"echo": {"sleep": 3}}
        health = requests.get(dev.job_url("health"), headers=dev.headers()).json()
        assert health["jobs"]["retried"] == 1


def test_workers_scale_up_with_the_queue_and_down_to_zero_when_idle(tmp_path):
    args = (RUNPOD_ECHO, "--workers-max", "2", "--idle-timeout", "1")
    with DevProcess(*args, data_dir=tmp_path) as dev:
        assert dev.workers() == []
        for _ in range(4):
            requests.post(dev.job_url("run"), json={"input": {"sleep": 1}}, headers=dev.headers())
        wait_until(lambda: len(dev.workers()) == 2, timeout_s=60)
        wait_until(
            lambda: (
                requests.get(dev.job_url("health"), headers=dev.headers()).json()["jobs"][
                    "completed"
                ]
                == 4
            ),
            timeout_s=60,
        )
        wait_until(lambda: dev.workers() == [], timeout_s=60)


def test_dev_serves_the_management_api_with_its_api_key_and_runs_created_endpoints(tmp_path):
    with DevProcess(ECHO, "--api-key", "k-admin", data_dir=tmp_path) as dev:
        manage = f"{dev.url}/v1/endpoints"
        dev.wait_for(rf"management API: {dev.url}/v1/endpoints")
        admin = {"authorization": "Bearer k-admin"}
        [echo] = requests.get(manage, headers=admin).json()
        assert (echo["id"], echo["templateId"], echo["status"]["phase"]) == ("echo", ECHO, "Ready")
        assert requests.get(manage).status_code == 401

        created = {"id": "second", "templateId": "tests/handlers/async_echo.py", "workersMax": 1}
        assert requests.post(manage, json=created, headers=admin).status_code == 200
        url = f"{dev.url}/v2/second/runsync"
        r = requests.post(url, json={"input": {"y": 2}}, headers=dev.headers())
        assert (r.json()["status"], r.json()["output"]) == ("COMPLETED", {"echo": {"y": 2}})
        assert requests.delete(f"{manage}/second", headers=admin).status_code == 204
        health = requests.get(f"{dev.url}/v2/second/health", headers=dev.headers())
        assert health.status_code == 404


def test_dev_mode_imports_no_kubernetes_client():
    code = "import sys, lockgate.apps.dev; print(sorted({'kopf', 'kubernetes'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_burst_of_fifty_jobs_scales_zero_to_max_and_back_to_zero_interrupting_none(tmp_path):
    args = (ECHO, "--workers-max", "4", "--idle-timeout", "1")
    with DevProcess(*args, data_dir=tmp_path) as dev:
        assert dev.workers() == []
        ids = [
            requests.post(
                dev.job_url("run"), json={"input": {"sleep": 0.5, "n": n}}, headers=dev.headers()
            ).json()["id"]
            for n in range(50)
        ]
        sizes = []

        def finished() -> bool:
            sizes.append(len(dev.workers()))
            jobs = requests.get(dev.job_url("health"), headers=dev.headers()).json()["jobs"]
            return jobs["completed"] + jobs["failed"] == 50

        wait_until(finished, timeout_s=90, every_s=0.2)
        assert max(sizes) == 4
        wait_until(lambda: dev.workers() == [], timeout_s=60)
        health = requests.get(dev.job_url("health"), headers=dev.headers()).json()
        assert health["jobs"]["completed"] == 50
        assert health["jobs"]["failed"] == health["jobs"]["retried"] == 0
        for job_id in ids:
            status = requests.get(dev.job_url(f"status/{job_id}"), headers=dev.headers()).json()
            assert status["status"] == "COMPLETED", status
        assert any("stopping (idle)" in line for line in dev.lines)


def test_edits_of_the_command_line_endpoint_are_kept_unless_a_flag_names_the_field(tmp_path):
    admin = {"authorization": "Bearer k"}
    edits = {"idleTimeout": 30, "workersMax": 1, "executionTimeoutMs": 60000, "name": "mine"}
    with DevProcess(ECHO, "--workers-max", "2", "--api-key", "k", data_dir=tmp_path) as dev:
        url = f"{dev.url}/v1/endpoints/echo"
        about = requests.get(f"{dev.url}/v1/about", headers=admin).json()
        assert "workersMax" in about["commandLineFields"]
        assert "idleTimeout" not in about["commandLineFields"]
        assert requests.patch(url, json=edits, headers=admin).json()["workersMax"] == 1
        refused = requests.patch(url, json={"templateId": RUNPOD_ECHO}, headers=admin)
        assert refused.status_code == 400
        assert refused.json()["error"].startswith("templateId:")
        assert "change the command line" in refused.json()["error"]
        assert requests.get(url, headers=admin).json()["templateId"] == ECHO
    with DevProcess(ECHO, "--api-key", "k", data_dir=tmp_path) as dev:  # no flag names them
        record = requests.get(f"{dev.url}/v1/endpoints/echo", headers=admin).json()
        assert {k: record[k] for k in edits} == edits
        assert any("earlier edits kept" in line and "workersMax=1" in line for line in dev.lines)
    with DevProcess(ECHO, "--workers-max", "3", "--api-key", "k", data_dir=tmp_path) as dev:
        record = requests.get(f"{dev.url}/v1/endpoints/echo", headers=admin).json()
        assert record["workersMax"] == 3  # the flag wins over the edit
        assert (record["idleTimeout"], record["executionTimeoutMs"]) == (30, 60000)
    with DevProcess(ECHO, "--api-key", "k", data_dir=tmp_path) as dev:
        record = requests.get(f"{dev.url}/v1/endpoints/echo", headers=admin).json()
        assert record["workersMax"] == 3  # the default: the flag's win dropped the edit
        assert record["idleTimeout"] == 30
