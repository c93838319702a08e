"""The Lua text prepended to every script at load time, generated from the Python
definitions, so the scripts copy no constant, field name nor argument position:

1. the constants (`constants()`): key-layout numbers and names from `store/keys.py`, the
   job record's field names (`F_<NAME>` for each `keys.F.<NAME>`), the states, and the field
   lists of `store/records.py`; a batch record's field names (`B_<NAME>`), its keys' parts
   (`BP_<PART>`) and the batch states (`BS_<STATE>`);
2. `common.lua` (the shared functions);
3. the script's arguments as named locals (`store/script_args.py`);
4. the script.

Constants only: nothing here calls Redis, so a script's commands are its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import resources

from lockgate.models import JobStatus
from lockgate.models.batch import BatchStatus
from lockgate.store import keys, records
from lockgate.store.args_batches import BATCH_SCRIPTS
from lockgate.store.args_jobs import JOB_SCRIPTS
from lockgate.store.args_workers import WORKER_SCRIPTS
from lockgate.store.script_args import ScriptArgs, lua_locals

# Every script, by name (store/lua/<name>.lua), with the dataclass of its arguments.
ARGS: dict[str, type[ScriptArgs]] = {
    c.SCRIPT: c for c in (*JOB_SCRIPTS, *WORKER_SCRIPTS, *BATCH_SCRIPTS)
}

LuaValue = int | str | Sequence[str] | Mapping[str, str]


def lua_literal(value: LuaValue) -> str:
    """`value` as a Lua literal: a number, a string, a list or a string-keyed table."""
    if isinstance(value, bool):
        raise TypeError("no booleans: say '1' or '0' as the scripts do")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        if not value.isprintable() or "'" in value or "\\" in value:
            raise ValueError(f"not a plain Lua string: {value!r}")
        return f"'{value}'"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k} = {lua_literal(v)}" for k, v in value.items()) + "}"
    return "{" + ", ".join(lua_literal(v) for v in value) + "}"


def constant_values() -> dict[str, LuaValue]:
    """Every constant the scripts get, by its Lua name."""
    fields = {f"F_{name}": value for name, value in vars(keys.F).items() if name.isupper()}
    batch = {f"B_{name}": value for name, value in vars(keys.B).items() if name.isupper()}
    batch |= {f"BP_{name}": value for name, value in vars(keys.BP).items() if name.isupper()}
    batch |= {f"BS_{status.name}": status.value for status in BatchStatus}
    return {
        "EVENTS": keys.EVENTS_CHANNEL,
        "ORDER_SLOTS": keys.ORDER_SLOTS,
        "RUNNING_GRACE": keys.RUNNING_GRACE_MS,
        "INDEX_MAX_AGE": keys.INDEX_MAX_AGE_MS,
        "STOPPED_RUNNING_MS": keys.STOPPED_RUNNING_MS,
        "INTERVAL_S": keys.HISTORY_INTERVAL_S,
        "INTERVAL_KEEP": keys.INTERVAL_KEEP_MS,
        "DONE_CARRIED": keys.DONE_CARRIED_BYTES,
        "ATTEMPTS_KEPT": keys.ATTEMPTS_KEPT,
        "COLD_START_KEEP": keys.COLD_START_KEEP_MS,
        "USAGE_CHUNK_S": keys.USAGE_CHUNK_S,
        "USAGE_KEEP_S": keys.USAGE_KEEP_S,
        "STATES": tuple(JobStatus),
        "ENDED": keys.ENDED_COUNTS,
        "RECORD_FIELDS": records.RECORD_FIELDS,
        "LISTED_FIELDS": records.LISTED_FIELDS,
        "DONE_HEAD": records.DONE_HEAD,
        "BATCH_KEY": keys.BATCH_KEY,
        "BATCH_ACTIVE": keys.BATCH_ACTIVE,
        "BATCH_PARTS": keys.BATCH_PARTS,
        **fields,
        **batch,
    }


def constants() -> str:
    """The Lua locals of `constant_values()`, one a line."""
    return "".join(f"local {k} = {lua_literal(v)}\n" for k, v in constant_values().items())


def _lua(name: str) -> str:
    return (resources.files("lockgate.store") / "lua" / f"{name}.lua").read_text()


def source(name: str) -> str:
    """The full source of script `name` as Redis runs it."""
    return "\n".join((constants(), _lua("common"), lua_locals(ARGS[name]), _lua(name)))
