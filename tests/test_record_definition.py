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
from lockgate.models.jobs import TTL_DEFAULT_MS
from lockgate.store import keys, records
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
