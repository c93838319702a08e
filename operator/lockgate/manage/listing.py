"""Pages of `GET /v1/endpoints`: the query (`limit`, `continue`, `name`, `phase`, `view`),
the continue token, the summary form, and choosing one page's rows from rows sorted by id.

Without `limit` the answer is every endpoint, as RunPod's API (and lockgate before pages)
answers it. With `limit` it is at most that many, in id order; when more may follow, the
answer's `X-Continue` header has the token for the next page (and `Link: <…>; rel="next"`
its URL). The body is a JSON list either way, so a client that knows no pages reads a
paged answer as it reads any other.

A token is opaque to clients: base64url of JSON holding the last id returned and, on
Kubernetes, the apiserver's own continue token (so a page costs one apiserver page).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from lockgate.gateway.errors import BadRequest
from lockgate.models import EndpointRecord, EndpointSpec, Phase

T = TypeVar("T")

MAX_LIMIT = 1000  # endpoints per page; without `limit` the answer has every endpoint
MAX_NAME_FILTER = 191  # characters: an endpoint's `name` is at most this long
MAX_TOKEN = 4096  # characters of a continue token (the apiserver's are ~100)
VIEWS = ("full", "summary")
DEFAULT_WORKERS_MIN = EndpointSpec.model_fields["workersMin"].default
DEFAULT_WORKERS_MAX = EndpointSpec.model_fields["workersMax"].default


class ContinueInvalid(ValueError):
    """The continue token is not one this API gave out."""


class ContinueExpired(LookupError):
    """The continue token is too old to continue a consistent list (Kubernetes: etcd
    compacted the revision it was read at, ~5 min by default)."""


@dataclass(frozen=True)
class Cursor:
    """Where the next page starts: after the id `after`, from the apiserver's page
    `resume` ("" for the first page of a fresh list)."""

    after: str = ""
    resume: str = ""

    def encode(self) -> str:
        raw = json.dumps({"a": self.after, "r": self.resume}, separators=(",", ":"))
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, token: str) -> Cursor:
        """The cursor in `token`; raises `ContinueInvalid`."""
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            fields = json.loads(raw)
        except (binascii.Error, ValueError) as err:
            raise ContinueInvalid(token) from err
        if not isinstance(fields, dict) or set(fields) != {"a", "r"}:
            raise ContinueInvalid(token)
        if not all(isinstance(v, str) for v in fields.values()):
            raise ContinueInvalid(token)
        return cls(after=fields["a"], resume=fields["r"])


@dataclass(frozen=True)
class EndpointSummary:
    """The summary form of an endpoint (`view=summary`): what a list shows, read from the
    stored object as it is, without the per-endpoint status reads of a full record."""

    id: str
    name: str
    phase: str
    workersMin: int
    workersMax: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class EndpointQuery:
    """One `GET /v1/endpoints`: a page (`limit` None: every endpoint) after `cursor`, of
    the endpoints whose id or name contains `name` (any case) and whose phase is in
    `phases` (empty: any), as records or summaries."""

    limit: int | None = None
    cursor: Cursor = field(default_factory=Cursor)
    name: str = ""
    phases: frozenset[str] = frozenset()
    summary: bool = False

    @property
    def filtered(self) -> bool:
        return bool(self.name or self.phases)

    def matches(self, row: EndpointSummary) -> bool:
        if self.phases and row.phase not in self.phases:
            return False
        needle = self.name.casefold()
        return not needle or needle in row.id.casefold() or needle in row.name.casefold()


@dataclass
class EndpointPage:
    """One answer: its endpoints in id order, and where the next page starts (None: this
    was the last)."""

    items: list[EndpointRecord] | list[EndpointSummary]
    next: Cursor | None = None


def take(
    rows: Sequence[tuple[EndpointSummary, T]], query: EndpointQuery, after: str, want: int | None
) -> tuple[list[T], str]:
    """From `rows` sorted by id: the payloads of at most `want` (None: all) rows after the
    id `after` that match `query`; and the id of the last one taken when a matching row
    follows it in `rows` ("" otherwise)."""
    taken: list[T] = []
    last = ""
    for row, payload in rows:
        if (after and row.id <= after) or not query.matches(row):
            continue
        if want is not None and len(taken) == want:
            return taken, last
        taken.append(payload)
        last = row.id
    return taken, ""


def summary_of_resource(obj: Mapping[str, Any]) -> EndpointSummary:
    """An Endpoint resource's summary, from its fields as stored (the apiserver checked
    their types against the CRD's schema); absent fields take the spec's defaults."""
    spec = obj.get("spec") or {}
    return EndpointSummary(
        id=obj["metadata"]["name"],
        name=spec.get("name") or "",
        phase=(obj.get("status") or {}).get("phase") or Phase.PENDING.value,
        workersMin=spec.get("workersMin", DEFAULT_WORKERS_MIN),
        workersMax=spec.get("workersMax", DEFAULT_WORKERS_MAX),
    )


# -- the query string ----------------------------------------------------------------------


def parse_query(params: Mapping[str, str]) -> EndpointQuery:
    """The query of `GET /v1/endpoints`; 400 naming the parameter when a value is bad."""
    token = params.get("continue", "")
    return EndpointQuery(
        limit=_limit(params.get("limit")),
        cursor=_cursor(token) if token else Cursor(),
        name=_name(params.get("name", "")),
        phases=_phases(params.get("phase", "")),
        summary=_view(params.get("view", "full")) == "summary",
    )


def _limit(value: str | None) -> int | None:
    if value is None:
        return None
    if not value.isascii() or not value.isdigit() or not 1 <= int(value) <= MAX_LIMIT:
        raise BadRequest(
            f"limit: a whole number from 1 to {MAX_LIMIT} (omit it for every endpoint)"
        )
    return int(value)


def _cursor(token: str) -> Cursor:
    if len(token) > MAX_TOKEN:
        raise BadRequest("continue: not a token from this API (too long)")
    try:
        return Cursor.decode(token)
    except ContinueInvalid as err:
        raise BadRequest(
            "continue: not a token from this API; use the X-Continue header of the "
            "previous page, or start again without continue"
        ) from err


def _name(value: str) -> str:
    if len(value) > MAX_NAME_FILTER:
        raise BadRequest(f"name: at most {MAX_NAME_FILTER} characters")
    return value


def _phases(value: str) -> frozenset[str]:
    canonical = {p.value.casefold(): p.value for p in Phase}
    wanted = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [v for v in wanted if v.casefold() not in canonical]
    if unknown:
        names = ", ".join(p.value for p in Phase)
        raise BadRequest(f"phase: {unknown[0]!r} is not a phase; use one or more of {names}")
    return frozenset(canonical[v.casefold()] for v in wanted)


def _view(value: str) -> str:
    if value not in VIEWS:
        raise BadRequest(f"view: {value!r} is not a view; use full or summary")
    return value
