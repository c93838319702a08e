"""One definition of a job record and of each script's arguments (issue 49 item 0): the
Lua scripts, the Python readers and the console's JavaScript copy none of it by hand, and
each test here fails when a copy drifts from the definition (store/keys.py,
store/records.py, store/args_*.py, models/jobs.py)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from importlib import resources

import pytest

from lockgate.models import JobStatus
from lockgate.models.batch import BatchStatus
from lockgate.models.jobs import TTL_DEFAULT_MS
from lockgate.store import keys, records
from lockgate.store.args_batches import BATCH_SCRIPTS
from lockgate.store.keys import F
from lockgate.store.lua_preamble import ARGS, constant_values, lua_literal, source
from lockgate.store.records import JobRecord
from lockgate.store.script_args import ScriptArgs, lua_locals
from lockgate.store.scripts import NAMES
from tests.conftest import REPO
from tests.console_js import run_js

LUA = resources.files("lockgate.store") / "lua"
JOBRECORD_JS = REPO / "operator/lockgate/manage/static/pages/jobrecord.js"
FIELD_VALUES = {v for k, v in vars(F).items() if k.isupper()}


def script_text(name: str) -> str:
    return (LUA / f"{name}.lua").read_text()


def code(text: str) -> str:
    """Lua source without its comments."""
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def test_every_script_has_one_arguments_class_and_every_class_a_script():
    files = {p.name.removesuffix(".lua") for p in LUA.iterdir() if p.name.endswith(".lua")}
    assert files - {"common"} == set(ARGS) == set(NAMES)
    assert all(issubclass(c, ScriptArgs) and n == c.SCRIPT for n, c in ARGS.items())


@pytest.mark.parametrize("name", sorted(ARGS))
def test_a_script_reads_its_arguments_by_name_only(name):
    """No script counts ARGV positions itself (a trailing list starts at `<name>_from`),
    and each argument its class declares is used: an unused one is a drifted copy (`ep`,
    every script's first, builds KEYS)."""
    body = code(script_text(name))
    assert not re.search(r"ARGV\[\d", body), "positional ARGV: name it in its dataclass"
    assert not re.search(r"unpack\(ARGV, \d|= \d+, #ARGV", body)
    for f in dataclasses.fields(ARGS[name])[1:]:
        local = f"{f.name}_from" if f.name == ARGS[name].REST else f.name
        assert re.search(rf"\b{local}\b", body), f"{name}.lua never uses `{local}`"


def test_no_script_redefines_a_generated_constant():
    for name in [*ARGS, "common"]:
        body = code(script_text(name))
        for const in constant_values():
            assert not re.search(rf"local {const}\s*=", body), f"{name}.lua copies {const}"


def test_no_script_names_a_record_field_by_its_short_name():
    """A job record's field in a hash command on the record is F_<NAME>, never 'st'."""
    on_record = re.compile(r"redis\.call\('H[A-Z]+', (jk|jkey\([^)]*\))(.*)")
    for name in [*ARGS, "common"]:
        for line in code(script_text(name)).splitlines():
            if m := on_record.search(line):
                quoted = set(re.findall(r"'([a-z0-9]+)'", m.group(2)))
                assert not quoted & FIELD_VALUES, f"{name}.lua: {line.strip()}"


def test_the_preamble_holds_the_python_values():
    values = constant_values()
    assert values["EVENTS"] == keys.EVENTS_CHANNEL
    assert values["ORDER_SLOTS"] == keys.ORDER_SLOTS
    assert values["INDEX_MAX_AGE"] == 604_800_000 + keys.RUNNING_GRACE_MS
    assert values["STATES"] == tuple(JobStatus)
    assert values["ENDED"] == keys.ENDED_COUNTS
    assert set(keys.ENDED_COUNTS) == set(JobStatus) - {"IN_QUEUE", "IN_PROGRESS"}
    assert {values[f"F_{k}"] for k in vars(F) if k.isupper()} == FIELD_VALUES
    assert values["RECORD_FIELDS"] == JobRecord.FIELDS
    assert "local F_STATUS = 'st'\n" in source("take")


def test_list_jobs_relies_on_the_listed_fields_starting_with_status_created_ttl():
    assert records.LISTED_FIELDS[:3] == (F.STATUS, F.CREATED, F.TTL)
    assert records.RECORD_FIELDS[0] == records.DONE_HEAD[0] == F.STATUS


def test_lua_literals():
    assert lua_literal(3) == "3"
    assert lua_literal("st") == "'st'"
    assert lua_literal(("a", "b")) == "{'a', 'b'}"
    assert lua_literal({"A": "x"}) == "{A = 'x'}"
    for bad in ("it's", "a\\b", "a\nb"):
        with pytest.raises(ValueError):
            lua_literal(bad)
    with pytest.raises(TypeError):
        lua_literal(True)


@dataclass(slots=True)
class Example(ScriptArgs):
    SCRIPT = "example"
    REST = "items"

    count: int
    label: str
    extra: int | None = None
    items: tuple[str, ...] = ()


def test_arguments_reach_lua_by_name_numbers_as_numbers():
    assert lua_locals(Example) == (
        "local ep, count, label, extra, items_from = "
        "ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), 5\n"
    )


def test_argv_is_the_fields_in_order_with_the_rest_spread_and_trailing_nones_left_out():
    assert Example("e", 1, "x").argv() == ["e", 1, "x"]
    assert Example("e", 1, "x").keys() == [keys.prefix("e")]
    assert Example("e", 1, "x", 2, ("a", "b")).argv() == ["e", 1, "x", 2, "a", "b"]
    with pytest.raises(ValueError, match="given after one left out"):
        Example("e", 1, "x", None, ("a",)).argv()


async def test_every_script_compiles_in_redis_with_its_preamble(redis):
    """Each full source (constants, common.lua, named arguments, the script) loads: a Lua
    syntax error or a local limit passed fails here, not on a request."""
    for name in NAMES:
        assert await redis.script_load(source(name))


def test_the_consoles_job_vocabulary_matches_the_python_definition():
    names = "{STATES, FINAL, ENDED, RETENTION, RETENTION_SYNC_MS, RETENTION_RUN_MS, TTL_DEFAULT_MS}"
    mapper = (
        "() => ({states: STATES, final: [...FINAL], ended: Object.keys(ENDED), text: RETENTION,"
        " sync: RETENTION_SYNC_MS, run: RETENTION_RUN_MS, ttl: TTL_DEFAULT_MS})"
    )
    [js] = run_js(JOBRECORD_JS, names, mapper, [0])
    assert js["states"] == list(JobStatus)
    assert set(js["final"]) == set(keys.ENDED_COUNTS)
    assert tuple(js["ended"]) == records.ATTEMPT_ENDS
    assert (js["sync"], js["run"], js["ttl"]) == (
        keys.RETENTION_SYNC_MS, keys.RETENTION_RUN_MS, TTL_DEFAULT_MS,
    )  # fmt: skip
    assert "for 1 minute after" in js["text"] and "for 30 minutes" in js["text"]
    assert "(default 24 h)" in js["text"]


# Batch Jobs (store/args_batches.py, store/lua/batch_*.lua): the record's fields, its keys'
# parts and the batch states are named once, in store/keys.py and models/batch.py.
BATCH_FIELDS = {v for k, v in vars(keys.B).items() if k.isupper()}
BATCH_SCRIPT_NAMES = sorted(n for n in ARGS if n.startswith("batch_"))
READERS = ("models/batch.py", "gateway/batch_runner.py", "gateway/batch_api.py")


def test_the_batch_scripts_are_files_with_named_arguments():
    assert set(BATCH_SCRIPT_NAMES) == {c.SCRIPT for c in BATCH_SCRIPTS}
    assert len(BATCH_SCRIPT_NAMES) == 11
    store = (REPO / "operator/lockgate/store/batches.py").read_text()
    assert "register_script" not in store and "KEYS[" not in store, "an inline script"


@pytest.mark.parametrize("name", BATCH_SCRIPT_NAMES)
def test_a_batch_script_names_no_field_key_part_nor_state_by_hand(name):
    """A batch record's field is B_<NAME>, a key part BP_<PART>, a state BS_<STATE>: a
    quoted copy in a script would drift from store/keys.py and models/batch.py."""
    body = code(script_text(name))
    quoted = set(re.findall(r"'([^']*)'", body))
    on_redis = {q for line in body.splitlines() if "redis.call" in line for q in
                re.findall(r"'([^']*)'", line)}  # fmt: skip
    assert not on_redis & BATCH_FIELDS, f"{name}.lua copies a field name"
    assert not quoted & set(BatchStatus), f"{name}.lua copies a batch state"
    assert not re.search(r"'bj|\.\. '[qnorla]'", body), f"{name}.lua builds a batch key"
    assert "KEYS[" not in body, "a batch key is bkey(batch, BP_<PART>), not a KEYS entry"


def test_the_preamble_holds_the_batch_definition():
    values = constant_values()
    assert {values[f"B_{k}"] for k in vars(keys.B) if k.isupper()} == BATCH_FIELDS
    assert values["BATCH_PARTS"] == keys.BATCH_PARTS
    assert {values[f"BS_{s.name}"] for s in BatchStatus} == set(BatchStatus)
    assert values["BATCH_KEY"] + values["BP_RESULTS"] == keys.batch("e", "b", "r")[7:-2]
    assert keys.batch("e", "b7", keys.BP.OPEN) == "lg:{e}:bjo:b7"
    assert keys.active_batches("e") == keys.batches("e") + values["BATCH_ACTIVE"]


@pytest.mark.parametrize("path", READERS)
def test_python_reads_a_batch_record_only_by_its_defined_field_names(path):
    """The summary (models/batch.py, which may not import store) and the gateway read the
    record by the names store/keys.py `B` gives it; a renamed field fails here."""
    text = (REPO / "operator/lockgate" / path).read_text()
    read = set(re.findall(r"fields(?:\.get\(|\[)\"([A-Za-z]+)\"", text))
    assert read <= BATCH_FIELDS, read - BATCH_FIELDS


async def test_the_batch_scripts_keep_a_batch_in_the_keys_python_reads(redis):
    """A round trip through the scripts and the Python readers: a drifted key or field
    name on either side loses what the other wrote."""
    from lockgate.models.batch import BatchLimits, summary
    from lockgate.store.batches import BatchStore, Refused

    store = BatchStore(redis)
    await store.create("e", "batch_1", 1_000, [("r1", b'{"input":{}}')], "http://h/", BatchLimits())
    assert await store.add("e", "batch_1", [("r2", b'{"input":{"a":1}}')], BatchLimits()) == 2
    assert await store.request_ids("e", "batch_1", 0, 10) == (["r1", "r2"], 2)
    assert await store.waiting("e", "batch_1") == 2
    assert await store.rename("e", "batch_1", "nightly")
    assert await store.finalize("e", "batch_1", 2_000, 10) == 2
    with pytest.raises(Refused, match="state: FINALIZED"):
        await store.delete_request("e", "batch_1", "r1")
    assert await store.queued("e", "batch_1", ["r1", "r2"]) == []
    assert await store.record("e", "batch_1", 1, [("r1", True, b'{"status":"COMPLETED"}')]) == (
        2, 1, 0, 1,
    )  # fmt: skip
    fields = await store.get("e", "batch_1")
    assert fields is not None
    shown = summary("batch_1", "e", fields)
    assert (shown["status"], shown["name"], shown["createdAt"]) == ("FINALIZED", "nightly", 1_000)
    assert (shown["requestTotal"], shown["requestCompleted"], shown["requestInProgress"]) == (
        2, 1, 1,
    )  # fmt: skip
    assert await store.conclude("e", "batch_1", BatchStatus.FAILED, 3_000, 60_000)
    assert await store.claim_webhook("e", "batch_1", 3_000, 5_000) == 1
    await store.settle_webhook("e", "batch_1", state="delivered")
    done = summary("batch_1", "e", await store.get("e", "batch_1") or {})
    assert (done["status"], done["doneAt"], done["webhook"]) == ("FAILED", 3_000, "DELIVERED")
    assert await redis.pttl(keys.batch("e", "batch_1", keys.BP.RESULTS)) > 0
    assert await redis.scard(keys.active_batches("e")) == 0
