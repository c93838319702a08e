"""Every Redis key, channel and duration of lockgate, in one place.

Every key of an endpoint carries the endpoint id as a hash tag (`lg:{<endpoint>}:…`), so
each script touches one Redis Cluster slot. The Lua scripts derive per-job and per-worker
keys from the `lg:{<endpoint>}:` prefix passed to them as KEYS[1]; the layout below is
the single description of what they build.

    lg:{ep}:q            ZSET  queued job ids, score = submission sequence (FIFO)
    lg:{ep}:ql           ZSET  queued lowPriority job ids, score = submission sequence
    lg:{ep}:seq          STR   submission sequence counter
    lg:{ep}:qb           STR   bytes of input queued (both queues), for the queued-bytes quota;
                               restarts from 0 whenever the queues are empty
    lg:{ep}:run          ZSET  in-progress job ids, score = execution deadline (ms)
    lg:{ep}:exp          ZSET  every job record, score = when it dies (ttl or retention, ms)
    lg:{ep}:w            ZSET  worker ids, score = last heartbeat (ms)
    lg:{ep}:wj:{worker}  SET   job ids a worker holds
    lg:{ep}:stop:{worker} LIST job ids the worker must stop
    lg:{ep}:stopping     ZSET  workers told to stop (their pod is going): no new job for
                               them; score = until when (ms)
    lg:{ep}:wx:{worker}  SET   job ids the worker was told to stop (cancel, timeout) whose
                               handler may still run: it counts as busy until its ping
                               no longer lists them
    lg:{ep}:gone         ZSET  workers released for good (process exited, pod deleted): not
                               registered again by a late ping; score = until when (ms)
    lg:{ep}:refresh      ZSET  workers that asked to be replaced after their job
                               (`refresh_worker`, the runpod SDK's `stopPod`, a person's
                               restart); score = until; a worker a person asked to stop for
                               good (a cluster's per-worker stop, `ask_stop`) has STOP_ASK +
                               until, so one read gives both
    lg:{ep}:stats        HASH  completed, failed, retried counters
    lg:{ep}:ix:{state}   ZSET  listing index of GET /requests: the job ids now in {state},
                               score = createdAt (ms) * ORDER_SLOTS + submission sequence
                               mod ORDER_SLOTS (fixed per job: newest first, ties broken);
                               moved by the scripts that change a job's state, left when
                               the record dies (sweep, purge, endpoint deletion)
    lg:{ep}:iv:{t}       HASH  what happened in the 10 s interval starting at epoch second
                               {t}: c, f, t, k (jobs that ended COMPLETED, FAILED,
                               TIMED_OUT, CANCELLED), s (workers new to the endpoint:
                               cold starts), b{b} (cold-start times in log bucket b),
                               d{b} (jobs taken with a
                               queue delay in log bucket b), x{b} (jobs ended with an
                               execution time in bucket b); dies after
                               INTERVAL_KEEP_MS, read by the history sampler
    lg:{ep}:hist         ZSET  history points (JSON, see manage/history.py), score = the
                               interval's epoch second; at most HISTORY_POINTS
    lg:{ep}:hist1m       ZSET  the same per minute (written with the minute's last interval),
                               score = the minute's epoch second; at most HISTORY_MINUTE_POINTS
    lg:{ep}:use:{chunk}  HASH  usage for billing (`store/usage.py`), written with each history
                               point (history.lua): "<hour>:w" worker-seconds, "<hour>:g:<gpu
                               type>" GPU-seconds, "<hour>:c" vCPU-seconds of the hour starting
                               at epoch second <hour>; one hash per USAGE_CHUNK_S starting at
                               epoch second {chunk}; dies USAGE_KEEP_S after its chunk ends;
                               kept when the endpoint is deleted (its usage is still billed)
    lg:{ep}:uk:{chunk}   HASH  usage per API key (`store/usage.py`), written by finish.lua with
                               each job a worker finished: "<hour>:<key id>:x" execution ms,
                               "<hour>:<key id>:g:<gpu type>" GPU-ms, "<hour>:<key id>:c"
                               vCPU-ms of the jobs that ended in the hour starting at epoch
                               second <hour> (key id "-": submitted without a key); chunks and
                               life as `use:{chunk}`
    lg:{ep}:ws           HASH  worker states the gateway cannot see: initializing, throttled,
                               unhealthy (counts) as the operator or dev pool last saw them;
                               dies WORKER_STATES_TTL_MS after the last report
    lg:{ep}:wst          HASH  worker -> when it started (ms, from its control plane), until
                               its first call times its cold start (iv: b{bucket}) or its
                               release; dies an hour after the last write
    lg:{ep}:wfc          HASH  worker -> its first call (ms), until its start is reported
                               (the operator may see a pod after its first call); the same
    lg:{ep}:un           HASH  worker -> JSON why it was marked unhealthy (models/unhealthy.py:
                               a fitness check, startup deadline or warm-up); written with its
                               release for good; entries older than UNHEALTHY_KEEP_MS pruned on
                               each write, the hash dies that long after the last
    lg:{ep}:lost         HASH  the endpoint's onWorkerLost policy, for the scripts that take
                               a job from a lost worker (common.lua `requeue`): p = requeue
                               or fail, n = requeueMaxRunS in ms (0: none); no key for the
                               default (requeue every job); written with the registry entry
                               (store/registry.py), removed with the endpoint
    lg:{ep}:unp          ZSET  workers marked unhealthy whose pod or process is still there
                               (score: when marked), counted in /health's `unhealthy`; a
                               release without why (it is gone) removes one; pruned as `un`
    lg:{ep}:wun          STR   the endpoint's count of warm-up job inputs (models/warmup.py),
                               written with its registry entry; absent: no warm-up
    lg:{ep}:wu           HASH  worker -> its warm-up as JSON {i: the input due or running, n:
                               the count, j: the running one's job id, k: how often it was
                               handed, d: its deadline (ms),
                               x: when the sweep found it overdue}; from its first call
                               (common.lua beat) until its last warm-up job is done or it
                               is released (docs/warm-up.md)
    lg:{ep}:lbu          HASH  load-balancing worker id -> its warm-up: "warming <deadline
                               ms>" (one gateway process sends it), "done", or "failed
                               <reason>"; removed with the worker
    lg:{ep}:wh           ZSET  webhook outbox: job ids, score = next attempt (ms)
    lg:{ep}:wha          HASH  job id -> webhook attempts made
    lg:{ep}:sweep        STR   lock: one replica sweeps the endpoint per interval
    lg:{ep}:wa:{worker}  STR   the network address the worker id is bound to (the first
                               to present it); dies `worker_binding_ttl_s` after its last use
    lg:{ep}:ik:{digest}  STR   job id first submitted with an Idempotency-Key (digest of the
                               key, its holder and route); dies with the job's ttl
    lg:{ep}:rel          LIST  releases (JSON, models/releases.py), newest first; the last
                               RELEASES_KEPT (store/releases.py)
    lg:{ep}:relv         STR   the newest release's version: a release is appended only
                               above it
    lg:{ep}:bld          ZSET  build ids (models/build.py), score = the build's sequence number
                               (newest highest); the newest BUILDS_KEPT (store/builds.py)
    lg:{ep}:bldn         STR   the build sequence counter
    lg:{ep}:b:{build}    STR   a build record (JSON); goes with its index entry
    lg:{ep}:bl:{build}   LIST  a build's log lines, JSON [epoch ms, source, text], oldest
                               first; the first BUILD_LOG_LINES kept
    lg:{ep}:blc:{build}  HASH  build container -> where the operator is in its log
                               (kube/buildlogs.py Cursor); goes with the build
    lg:{ep}:bhk          STR   the endpoint's push-webhook secret (store/builds.py HookSecrets)
    lg:{ep}:j:{id}       HASH  job record (fields in FIELDS below); expires at ttl / retention
    lg:{ep}:s:{id}       LIST  stream chunks not yet read by /stream; dies with the record
    lg:{ep}:rl:{op}:{owner}:{start} STR requests granted to replicas in the fixed
                               rate-limit window starting at {start} (ms); dies 1 s after it
    lg:{ep}:rc:{op}:{owner} HASH concurrency slots held: replica -> "slots:lease end (ms)";
                               an expired lease is dropped
    lg:{ep}:lbw          HASH  load-balancing workers: worker id -> JSON {address (host:port of
                               its HTTP server), health (host:port), path (health path),
                               draining (taken out of routing)}; written by whoever runs the
                               workers (dev pool, operator), read by every gateway
    lg:{ep}:lbh          HASH  load-balancing worker id -> "<state> <code> <at ms>" as a
                               gateway's health poll last saw it (state: healthy,
                               initializing, unhealthy; code 0: no answer); an entry older
                               than LB_HEALTH_STALE_MS counts as initializing
    lg:{ep}:lbr          HASH  gateway process id -> JSON {held, flight: {worker: n}, exp}:
                               the requests it holds (no routable worker yet) and has in
                               flight per worker; ignored once `exp` (ms) passed
    lg:{ep}:lbp          HASH  parked load-balancing workers (scaled down, resumable by a
                               `strict-resume` request): worker id -> JSON {worker (the `lbw`
                               record), until (ms: gone after this)}; not in `lbw`
    lg:{ep}:lbpw         SET   parked worker ids a gateway asked back (`strict-resume`); taken
                               whole by whoever runs the workers at its next tick
    lg:endpoints         HASH  endpoint id -> registry entry (JSON)
    lg:usage             ZSET  endpoint ids with usage (`lg:{ep}:use:*`), deleted ones too;
                               score = the newest hour with some (epoch s); a member older
                               than USAGE_KEEP_S is dropped when the set is read
    lg:templates         HASH  template id -> dev mode's template (JSON: its fields and
                               createdAt); a cluster keeps Template resources instead
    lg:registryauth      HASH  registry credential id -> JSON {name, username, registry,
                               createdAt}; dev mode's also holds the password (never
                               shown); a cluster's password is only in its Secret
    lg:volumes           HASH  network volume id -> dev mode's volume (JSON: name, size,
                               dataCenterId, createdAt); a cluster keeps PVCs instead
    lg:keys              HASH  sha256(api key) -> key record (JSON: name, scopes, endpoints,
                               created); never the key itself
    lg:secrets           HASH  account secret id -> JSON {name, description, createdAt,
                               valueLastUpdatedAt}; never the value (a Secret on a
                               cluster, a 0600 file in dev mode's data folder)
    lg:{mr:<caller>}:<window>:<start>
                         STR   management requests of one caller (its key's name) in the
                               fixed `window` (minute, hour, day) starting at epoch second
                               `start`; dies with its window (`store/manage_rates.py`)
    lg:{ep}:bj           ZSET  the endpoint's batch ids (Batch Jobs, store/batches.py), score =
                               createdAt (ms): the list is newest first
    lg:{ep}:bja          SET   its batch ids not yet done (DRAFT, or FINALIZED and running):
                               the active-batches limit counts them
    lg:{ep}:bj:{batch}   HASH  a batch: status, name, createdAt, total, completed, failed,
                               inProgress, bytes, webhook, cancelling, doneAt, wh* (its
                               webhook's delivery)
    lg:{ep}:bjq:{batch}  ZSET  its request ids in upload order (score: the upload sequence)
    lg:{ep}:bjn:{batch}  HASH  request id -> the request's JSON, until it is queued as a job of
                               the batch pool (`batch-<ep>`, models/batch.py)
    lg:{ep}:bjo:{batch}  SET   request ids queued as jobs and not yet final
    lg:{ep}:bjr:{batch}  HASH  request id -> its final result (JSON: status, output, error,
                               startedAt, completedAt; ms), kept for as long as the batch
    lg:{ep}:bjl:{batch}  STR   the replica whose round it is (a lock for most of a round)
    lg:batches           SET   "<ep> <batch>" of every batch FINALIZED and not done: what the
                               gateways' batch feeder and tracker look after
"""

from __future__ import annotations

import os
import re

from lockgate.models.jobs import MAX_DURATION_MS

ENDPOINTS = "lg:endpoints"
USAGE_ENDPOINTS = "lg:usage"
TEMPLATES = "lg:templates"
REGISTRY_AUTHS = "lg:registryauth"
NETWORK_VOLUMES = "lg:volumes"
SECRETS = "lg:secrets"
API_KEYS = "lg:keys"
EVENTS_CHANNEL = "lg:events"

# Ids appear inside key names and URLs; anything else answers 404 before touching Redis.
ENDPOINT_ID_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
JOB_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
WORKER_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,253}$")


def new_job_id() -> str:
    """A fresh job id: a random (version 4) UUID as text, as `str(uuid.uuid4())` gives, at
    half its cost (no UUID object on each submission)."""
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40  # version 4
    raw[8] = raw[8] & 0x3F | 0x80  # RFC 4122 variant
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


# Retention of results after completion (ms), the spec's "Time limits and retention".
RETENTION_RUN_MS = 30 * 60 * 1000
RETENTION_SYNC_MS = 60 * 1000
# How long a worker told to stop is refused new jobs (ms): longer than any pod takes to go.
STOPPING_MS = 2 * 60 * 60 * 1000
STOP_ASK = 2**50  # added to a stop ask's score in `refresh` (epoch ms are below 2**41)
# Index entries per ms of createdAt in the listing index's score.
ORDER_SLOTS = 1024
# How long a released worker id stays refused (ms): longer than an orphan outlives it.
GONE_MS = STOPPING_MS
# How long why a worker was marked unhealthy stays shown (ms).
UNHEALTHY_KEEP_MS = 60 * 60 * 1000
# Builds kept per endpoint (the newest; any of them can be fetched by id), and the lines
# of one build's log kept (its first: a builder's output past this is dropped).
BUILDS_KEPT = 1000
BUILD_LOG_LINES = 20_000


# History for the console's charts: one point per interval, one hour kept ...
HISTORY_INTERVAL_S = 10
HISTORY_POINTS = 360
# ... and one point per minute, a day kept (`hist1m`).
HISTORY_MINUTE_S = 60
HISTORY_MINUTE_POINTS = 1440
# Usage for billing: hours of worker-seconds kept in one hash per week (s) ...
USAGE_CHUNK_S = 7 * 24 * 3600
# ... for 400 days (s): a `year` bucket's report from 30 days before New Year's Day.
USAGE_KEEP_S = 400 * 24 * 3600
# Per-interval counters outlive their interval long enough for a late sampler (ms).
INTERVAL_KEEP_MS = 15 * 60 * 1000
# Worker-state reports vanish when their reporter stops reporting (ms).
WORKER_STATES_TTL_MS = 30_000
# A load-balancing worker's health as last polled means nothing after this long (ms); a
# poller writes it again at least every LB_HEALTH_REFRESH_MS.
LB_HEALTH_STALE_MS = 30_000
LB_HEALTH_REFRESH_MS = 10_000
# A gateway's report of held and in-flight requests counts this long after it was written
# (ms); a live gateway writes it again well before (gateway/lb_demand.py).
LB_REQUESTS_TTL_MS = 10_000


def manage_rate(caller: str, window: str, start_s: int) -> str:
    """A caller's management request count in one window (one slot per caller)."""
    return f"lg:{{mr:{caller}}}:{window}:{start_s}"


def prefix(endpoint_id: str) -> str:
    """The hash-tagged prefix of every key of one endpoint."""
    return f"lg:{{{endpoint_id}}}:"


def job(endpoint_id: str, job_id: str) -> str:
    return f"{prefix(endpoint_id)}j:{job_id}"


def stream(endpoint_id: str, job_id: str) -> str:
    return f"{prefix(endpoint_id)}s:{job_id}"


def lb_workers(endpoint_id: str) -> str:
    return f"{prefix(endpoint_id)}lbw"


def warmup_count(endpoint_id: str) -> str:
    return f"{prefix(endpoint_id)}wun"


def lb_warmups(endpoint_id: str) -> str:
    return f"{prefix(endpoint_id)}lbu"


def lb_health(endpoint_id: str) -> str:
    return f"{prefix(endpoint_id)}lbh"


def lb_requests(endpoint_id: str) -> str:
    return f"{prefix(endpoint_id)}lbr"


def lost_policy(endpoint_id: str) -> str:
    return f"{prefix(endpoint_id)}lost"


def lb_parked(endpoint_id: str) -> str:
    return f"{prefix(endpoint_id)}lbp"


def lb_resume(endpoint_id: str) -> str:
    return f"{prefix(endpoint_id)}lbpw"


def releases(endpoint_id: str) -> str:
    return f"{prefix(endpoint_id)}rel"


def release_version(endpoint_id: str) -> str:
    return f"{prefix(endpoint_id)}relv"


def builds(endpoint_id: str) -> str:
    return f"{prefix(endpoint_id)}bld"


def build_seq(endpoint_id: str) -> str:
    return f"{prefix(endpoint_id)}bldn"


def build(endpoint_id: str, build_id: str) -> str:
    return f"{prefix(endpoint_id)}b:{build_id}"


def build_log(endpoint_id: str, build_id: str) -> str:
    return f"{prefix(endpoint_id)}bl:{build_id}"


def build_log_cursors(endpoint_id: str, build_id: str) -> str:
    return f"{prefix(endpoint_id)}blc:{build_id}"


def hook_secret(endpoint_id: str) -> str:
    return f"{prefix(endpoint_id)}bhk"


def worker_address(endpoint_id: str, worker_id: str) -> str:
    return f"{prefix(endpoint_id)}wa:{worker_id}"


# Durations and sizes the Lua scripts use (store/lua_preamble.py hands them over).
# A running job's record outlives its ttl by this much (ms), so the sweeper can still find
# its worker to stop it; readers treat the job as gone from the ttl on.
RUNNING_GRACE_MS = 60_000
# No record lives longer than this after its submission (ms): the longest ttl (retention
# never outlasts the ttl) plus the grace.
INDEX_MAX_AGE_MS = MAX_DURATION_MS + RUNNING_GRACE_MS
# A job a worker was told to stop counts as running (`wx:<worker>`) this long (ms) after the
# last ping that listed it.
STOPPED_RUNNING_MS = 60_000
# A job's end event carries its final record when its output and error hold at most this
# many bytes (common.lua `done_event`).
DONE_CARRIED_BYTES = 8192
# Takes of a job kept in its attempt history (`ah`).
ATTEMPTS_KEPT = 10
# Unmatched worker starts and first calls (`wst`, `wfc`) die this long after the last write.
COLD_START_KEEP_MS = 60 * 60 * 1000
# The field of an interval (`iv:<t>`) counting the jobs that ended in each final state.
ENDED_COUNTS = {"COMPLETED": "c", "FAILED": "f", "TIMED_OUT": "t", "CANCELLED": "k"}


# Job record fields. Short names: a queued job's record is most of its memory.
class F:
    STATUS = "st"
    INPUT = "in"  # raw JSON of `input`
    WEBHOOK = "wh"
    S3 = "s3"  # raw JSON of `s3Config`
    EXEC_TIMEOUT = "et"  # ms, only when the request's policy sets it
    LOW_PRIORITY = "lp"  # "1" when lowPriority
    TTL = "tl"  # ms
    SYNC = "sy"  # "1" for /runsync jobs (sync- ids, 1 min retention)
    LIVE = "lv"  # "1" when a client reads the stream as it comes (each chunk publishes c:)
    CHUNKS_SENT = "cs"  # chunks a live job's worker has streamed so far
    CHUNKS_READ = "ch"  # chunks of a live job read (and removed) from its stream so far
    CREATED = "cr"  # ms, submission time; ttl counts from here
    QUEUED = "qd"  # ms, last time it entered the queue (submission or retry)
    SEQ = "sq"  # position in the FIFO
    STARTED = "sa"  # ms
    FINISHED = "fi"  # ms
    WORKER = "wk"
    ATTEMPTS = "at"
    ATTEMPT_LOG = "ah"  # JSON: the last 10 takes (worker, when, how each ended), common.lua
    OUTPUT = "out"  # raw JSON
    ERROR = "err"
    STREAM_BYTES = "sb"  # bytes of stream chunks not yet read by /stream
    PROGRESS = "pg"  # raw JSON: the latest progress_update of a running job
    WATCHED = "wt"  # "1" once a `/status?wait=` held for it: its end publishes `d:`
    API_KEY = "ak"  # the id of the API key that submitted it (keys API's `id`); none: no key


# Batch Jobs (store/batches.py, store/lua/batch_*.lua): every key of a batch under its
# endpoint's hash tag, `lg:{ep}:bj<part>:<batch>`; the Lua scripts get these names from
# the preamble (store/lua_preamble.py: BATCH_KEY, BP_<PART>, BATCH_ACTIVE, B_<FIELD>).
ACTIVE_BATCHES = "lg:batches"
BATCH_KEY = "bj"  # the index `lg:{ep}:bj`, and the start of each batch's keys
BATCH_ACTIVE = "a"  # `lg:{ep}:bja`: the batches not yet done


class BP:
    """The parts of a batch's keys (`batch(ep, id, part)`)."""

    RECORD = ""  # HASH: the record (fields: `B`)
    IDS = "q"  # ZSET: request ids in upload order
    INPUTS = "n"  # HASH: request id -> JSON, until it is queued
    OPEN = "o"  # SET: queued, not final
    RESULTS = "r"  # HASH: request id -> its final result (JSON)
    TURN = "l"  # STR: the round's lock


BATCH_PARTS = (BP.RECORD, BP.IDS, BP.INPUTS, BP.OPEN, BP.RESULTS, BP.TURN)


class B:
    """A batch record's fields (`lg:{ep}:bj:<batch>`), as the API's summary names them where
    it shows them (models/batch.py `summary`)."""

    STATUS = "status"  # models.batch.BatchStatus
    NAME = "name"
    CREATED = "createdAt"  # ms
    TOTAL = "total"
    COMPLETED = "completed"
    FAILED = "failed"
    IN_PROGRESS = "inProgress"
    BYTES = "bytes"  # of request JSON, against the per-batch limit
    SEQ = "seq"  # the last upload sequence (the score in `IDS`)
    WEBHOOK = "webhook"  # its URL, when given
    FINALIZED = "finalizedAt"  # ms
    CANCELLING = "cancelling"  # "1" once cancelled
    DONE = "doneAt"  # ms, once done
    WH_STATE = "whState"  # pending, delivered, gave_up
    WH_DUE = "whDue"  # ms: the next attempt
    WH_ATTEMPTS = "whAttempts"
    WH_LEASE = "whLease"  # ms: until when a replica holds the attempt


def batches(endpoint_id: str) -> str:
    return f"{prefix(endpoint_id)}{BATCH_KEY}"


def active_batches(endpoint_id: str) -> str:
    return f"{prefix(endpoint_id)}{BATCH_KEY}{BATCH_ACTIVE}"


def batch(endpoint_id: str, batch_id: str, part: str = BP.RECORD) -> str:
    """A batch's record (`part` ""), or one of its parts (`BP`)."""
    return f"{prefix(endpoint_id)}{BATCH_KEY}{part}:{batch_id}"
