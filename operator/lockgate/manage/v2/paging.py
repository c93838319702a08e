"""RunPod's cursor pagination, shared by the v2 lists that have it (builds, releases): the
query's `cursor`, the answer's `pagination`, and a bad cursor as a 422."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from lockgate.gateway.errors import Unprocessable
from lockgate.manage.releases import BadCursor


class PageQuery(BaseModel):
    """A list's query: `cursor` (opaque, from `pagination.nextCursor`); each list adds its
    own `limit` (RunPod's bounds differ per list)."""

    model_config = ConfigDict(extra="ignore")

    cursor: str | None = Field(None, min_length=1)


class Pagination(BaseModel):
    """The answer's cursor to the next page, if there is one."""

    nextCursor: str | None
    hasNextPage: bool


def below(query: PageQuery, decode: Callable[[str], int]) -> int | None:
    """Where the page asked for starts (None: the first page); 422 for a cursor `decode`
    refuses (malformed, another list's or another endpoint's)."""
    if query.cursor is None:
        return None
    try:
        return decode(query.cursor)
    except BadCursor as err:
        raise Unprocessable(str(err), errors=[str(err)]) from err


def pagination(following: str | None) -> dict[str, Any]:
    """The `pagination` member of a page whose next page starts at `following`."""
    return Pagination(nextCursor=following, hasNextPage=following is not None).model_dump()
