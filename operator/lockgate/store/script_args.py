"""The arguments of a Lua script, named once: one dataclass per script (slots, not frozen:
one is built for every script call, and a frozen one costs several times more to build).

A script's dataclass is the only place its arguments are listed. The Python side builds
KEYS and ARGV from an instance (`keys()`, `argv()`); the Lua side gets them as named locals
from a preamble generated from the same class (`lua_locals`, prepended at load time by
`store/scripts.py`), so neither side counts positions.

- Every script's first argument is `ep`, the endpoint id; KEYS[1] is its key prefix.
- Fields are ARGV in declaration order. An `int` field reaches Lua as a number
  (`tonumber`), any other as the string Redis hands over.
- A field named in `REST` holds a variable number of trailing arguments (a sequence): Lua
  gets `<name>_from`, the ARGV index of the first (`unpack(ARGV, x_from)`, `for i = x_from,
  #ARGV`).
- Optional trailing arguments default to None and are left out of ARGV when they and every
  field after them are None (Lua sees nil).
"""

from __future__ import annotations

import dataclasses
import operator
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from lockgate.store import keys

Arg = str | bytes | int

# Lua's reserved words cannot name a local.
_LUA_RESERVED = frozenset(
    ("and", "break", "do", "else", "elseif", "end", "false", "for", "function", "if", "in"),
) | frozenset(("local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while"))


@dataclass(slots=True)
class ScriptArgs:
    """The arguments of one script call (subclasses name the script in SCRIPT)."""

    SCRIPT: ClassVar[str]
    REST: ClassVar[str | None] = None

    ep: str

    def keys(self) -> list[str]:
        """KEYS: the endpoint's hash-tagged prefix (every script touches one slot)."""
        return [keys.prefix(self.ep)]

    def argv(self) -> list[Arg]:
        """ARGV in declaration order, the REST field spread, trailing Nones left out."""
        values, rest_at = _layout(type(self))
        given = values(self)
        head, tail = (given, ()) if rest_at is None else (given[:rest_at], given[rest_at])
        if None in head:  # optional arguments left out: only trailing ones may be
            first = head.index(None)
            if tail or any(v is not None for v in head[first:]):
                raise ValueError(f"{self.SCRIPT}: an argument given after one left out")
            head = head[:first]
        return [*head, *tail]


Layout = tuple[Callable[[ScriptArgs], tuple[Any, ...]], int | None]
_LAYOUTS: dict[str, Layout] = {}  # by class qualified name


def _layout(cls: type[ScriptArgs]) -> Layout:
    """How to read a class's arguments, worked out once (every script call builds its
    ARGV; C-level attribute reads keep that as cheap as building the list by hand): a
    function returning every field's value in order, and the REST field's index."""
    key = f"{cls.__module__}.{cls.__qualname__}"
    if (found := _LAYOUTS.get(key)) is not None:
        return found
    names = [f.name for f in dataclasses.fields(cls)]
    getter = operator.attrgetter(*names)
    values = getter if len(names) > 1 else (lambda args: (getter(args),))
    layout = _LAYOUTS[key] = (values, names.index(cls.REST) if cls.REST else None)
    return layout


def _is_int(hint: Any) -> bool:
    """Whether a field's type is an int (or an optional one): a number in Lua."""
    return hint is int or int in typing.get_args(hint)


def lua_locals(cls: type[ScriptArgs]) -> str:
    """The Lua preamble that reads `cls`'s arguments into named locals."""
    hints = typing.get_type_hints(cls)
    names: list[str] = []
    values: list[str] = []
    for i, f in enumerate(dataclasses.fields(cls), start=1):
        if f.name in _LUA_RESERVED:
            raise ValueError(f"{cls.__name__}.{f.name} is a Lua reserved word")
        if f.name == cls.REST:
            names.append(f"{f.name}_from")
            values.append(str(i))
            continue
        names.append(f.name)
        values.append(f"tonumber(ARGV[{i}])" if _is_int(hints[f.name]) else f"ARGV[{i}]")
    return f"local {', '.join(names)} = {', '.join(values)}\n"
