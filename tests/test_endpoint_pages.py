"""Pages of `GET /v1/endpoints` without a server: the query string, the continue token,
choosing a page's rows, and `KubernetesControlPlane.page` over an apiserver stand-in that
pages as the real one does (tests/test_manage_api.py runs them against both real planes)."""

from __future__ import annotations

import base64
import itertools
from typing import Any

import pytest

from lockgate.gateway.errors import BadRequest
from lockgate.kube import controlplane as manage_kube
from lockgate.kube.cluster import ClusterError, Gone
from lockgate.kube.controlplane import KubernetesControlPlane
from lockgate.manage.listing import (
    MAX_LIMIT,
    ContinueExpired,
    ContinueInvalid,
    Cursor,
    EndpointQuery,
    EndpointSummary,
    parse_query,
    summary_of_resource,
    take,
)

# -- the query string ----------------------------------------------------------------------


def test_no_parameters_ask_for_every_endpoint_in_full() -> None:
    assert parse_query({}) == EndpointQuery()
    assert parse_query({}).limit is None


def test_parameters_are_read_with_phases_in_any_case_and_empty_ones_ignored() -> None:
    token = Cursor(after="ep-b", resume="k8s").encode()
    params = {"limit": "50", "continue": token, "name": "LLM", "phase": "ready, FAILED"}
    query = parse_query({**params, "view": "summary"})
    assert query == EndpointQuery(
        limit=50,
        cursor=Cursor(after="ep-b", resume="k8s"),
        name="LLM",
        phases=frozenset({"Ready", "Failed"}),
        summary=True,
    )
    assert parse_query({"continue": "", "name": "", "phase": ""}) == EndpointQuery()
    assert parse_query({"limit": "1"}).limit == 1
    assert parse_query({"limit": str(MAX_LIMIT)}).limit == MAX_LIMIT


def bad_token(fields: Any) -> str:
    return base64.urlsafe_b64encode(repr(fields).replace("'", '"').encode()).decode()


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "-1"}, "limit"),
        ({"limit": str(MAX_LIMIT + 1)}, "limit"),
        ({"limit": "abc"}, "limit"),
        ({"limit": "1.5"}, "limit"),
        ({"limit": ""}, "limit"),
        ({"limit": "٣"}, "limit"),  # a digit to str.isdigit, not to a person
        ({"phase": "Running"}, "phase"),
        ({"phase": "Ready,Sleeping"}, "phase"),
        ({"view": "everything"}, "view"),
        ({"name": "x" * 192}, "name"),
        ({"continue": "not a token"}, "continue"),
        ({"continue": "e30"}, "continue"),  # {}
        ({"continue": bad_token({"a": 1, "r": ""})}, "continue"),
        ({"continue": bad_token(["a", "r"])}, "continue"),
        ({"continue": "x" * 5000}, "continue"),
    ],
)
def test_a_bad_value_is_a_400_naming_its_parameter(params: dict, named: str) -> None:
    with pytest.raises(BadRequest) as refused:
        parse_query(params)
    assert refused.value.message.startswith(f"{named}: ")


def test_a_cursor_survives_its_token() -> None:
    for cursor in (Cursor(), Cursor(after="a"), Cursor(after="b-1", resume="eyJ2Ijoi+/=")):
        assert Cursor.decode(cursor.encode()) == cursor
    with pytest.raises(ContinueInvalid):
        Cursor.decode("%%%")


# -- which rows a page takes ---------------------------------------------------------------


def row(endpoint_id: str, name: str = "", phase: str = "Ready") -> EndpointSummary:
    return EndpointSummary(endpoint_id, name, phase, 0, 3)


LATE = frozenset({"Failed", "Pending"})
ROWS = [
    (r, r.id)
    for r in (
        row("a-llm", "Production LLM"),
        row("b-img", "images", "Failed"),
        row("c-llm", "staging llm", "Pending"),
        row("d-tts", "speech"),
        row("e-llm", "", "Failed"),
    )
]


@pytest.mark.parametrize(
    ("query", "after", "want", "taken", "last"),
    [
        (EndpointQuery(), "", None, ["a-llm", "b-img", "c-llm", "d-tts", "e-llm"], ""),
        (EndpointQuery(), "", 2, ["a-llm", "b-img"], "b-img"),
        (EndpointQuery(), "b-img", 2, ["c-llm", "d-tts"], "d-tts"),
        (EndpointQuery(), "c-llm", 2, ["d-tts", "e-llm"], ""),  # the end: nothing follows
        (EndpointQuery(), "e-llm", 2, [], ""),
        (EndpointQuery(), "b", 1, ["b-img"], "b-img"),  # after an id that is gone
        (EndpointQuery(name="LLM"), "", 2, ["a-llm", "c-llm"], "c-llm"),  # id or name
        (EndpointQuery(name="production"), "", 2, ["a-llm"], ""),
        (EndpointQuery(name="TTS"), "", None, ["d-tts"], ""),
        (EndpointQuery(phases=frozenset({"Failed"})), "", 1, ["b-img"], "b-img"),
        (EndpointQuery(phases=frozenset({"Failed"})), "b-img", 1, ["e-llm"], ""),
        (EndpointQuery(name="llm", phases=LATE), "", 5, ["c-llm", "e-llm"], ""),
        (EndpointQuery(phases=frozenset({"Degraded"})), "", 5, [], ""),
    ],
)
def test_a_page_takes_the_matching_rows_after_the_cursor(
    query: EndpointQuery, after: str, want: int | None, taken: list[str], last: str
) -> None:
    assert take(ROWS, query, after, want) == (taken, last)


def test_a_summary_is_read_from_the_resource_as_stored_with_the_specs_defaults() -> None:
    bare = {"metadata": {"name": "ep-bare"}}
    assert summary_of_resource(bare) == EndpointSummary("ep-bare", "", "Pending", 0, 3)
    stored = {
        "metadata": {"name": "ep-set"},
        "spec": {"name": "LLM", "workersMin": 5, "workersMax": 2},  # invalid: shown as stored
        "status": {"phase": "Failed"},
    }
    assert summary_of_resource(stored) == EndpointSummary("ep-set", "LLM", "Failed", 5, 2)
    assert summary_of_resource(stored).to_json() == {
        "id": "ep-set",
        "name": "LLM",
        "phase": "Failed",
        "workersMin": 5,
        "workersMax": 2,
    }


# -- KubernetesControlPlane.page over an apiserver stand-in --------------------------------


class PagingCluster:
    """Endpoints listed as the apiserver lists them: in name order, `limit` at a time, a
    continue token for the rest (here the next index, with the list's "revision", which
    a test can expire). Counts the reads."""

    def __init__(self, objects: list[dict]) -> None:
        self.objects = sorted(objects, key=lambda o: o["metadata"]["name"])
        self.revision = 1
        self.expired_before = 0
        self.reads = 0

    async def list_endpoints_page(
        self, namespace: str, *, limit: int, resume: str = "", selector: str = ""
    ) -> tuple[list[dict], str]:
        self.reads += 1
        start = 0
        if resume:
            revision, _, index = resume.partition(":")
            if not index.isdigit():
                raise ClusterError("continue key is not valid", 400)
            if int(revision) < self.expired_before:
                raise Gone("The provided continue parameter is too old", 410)
            start = int(index)
        end = start + limit if limit else len(self.objects)
        following = f"{self.revision}:{end}" if end < len(self.objects) else ""
        return self.objects[start:end], following


def endpoint(name: str, display: str = "", phase: str = "Ready") -> dict:
    return {"metadata": {"name": name}, "spec": {"name": display}, "status": {"phase": phase}}


PHASES = ["Ready", "Failed", "Pending", "Degraded"]
MANY = [endpoint(f"ep-{i:03d}", "llm" if i % 7 == 0 else "", PHASES[i % 11 % 4]) for i in range(60)]


def plane(cluster: PagingCluster) -> KubernetesControlPlane:
    return KubernetesControlPlane(cluster, namespace="ns", job_api_url=lambda i: f"/v2/{i}/")


async def every_page(control: KubernetesControlPlane, query: EndpointQuery) -> list[list[Any]]:
    pages = []
    while True:
        page = await control.page(query)
        pages.append(page.items)
        if page.next is None:
            return pages
        query = EndpointQuery(
            limit=query.limit,
            cursor=Cursor.decode(page.next.encode()),  # as a client sends it back
            name=query.name,
            phases=query.phases,
            summary=query.summary,
        )


@pytest.fixture
def small_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Apiserver reads of at most 5 Endpoints, at most 10 read per answer: filtered pages
    take several reads, and some end short."""
    monkeypatch.setattr(manage_kube, "MAX_CHUNK", 5)
    monkeypatch.setattr(manage_kube, "MAX_SCANNED", 10)


@pytest.mark.parametrize(
    ("name", "phases"),
    [("", frozenset()), ("LLM", frozenset()), ("", frozenset({"Failed"})),
     ("ep-0", frozenset({"Ready", "Degraded"})), ("nothing", frozenset())],
)  # fmt: skip
@pytest.mark.parametrize("limit", [1, 2, 3, 7, 50, 1000])
@pytest.mark.usefixtures("small_reads")
async def test_kubernetes_pages_give_every_matching_endpoint_once_in_order(
    limit: int, name: str, phases: frozenset[str]
) -> None:
    cluster = PagingCluster(MANY)
    query = EndpointQuery(limit=limit, name=name, phases=phases, summary=True)
    everything = [summary_of_resource(o) for o in MANY]
    expected = [r.id for r in everything if query.matches(r)]

    pages = await every_page(plane(cluster), query)

    assert [r.id for r in itertools.chain(*pages)] == expected
    assert all(len(p) <= limit for p in pages)
    if not query.filtered:  # a page of an unfiltered list is one apiserver page, and full
        assert cluster.reads == len(pages)
        assert all(len(p) == limit for p in pages[:-1])


@pytest.mark.usefixtures("small_reads")
async def test_kubernetes_a_filtered_page_reads_more_while_few_match_then_stops() -> None:
    cluster = PagingCluster(MANY)
    control = plane(cluster)
    page = await control.page(EndpointQuery(limit=2, name="nothing matches"))
    assert (page.items, cluster.reads) == ([], 3)  # reads of 2, 4 and 5: 11 read
    assert page.next == Cursor(resume="1:11")  # a short (empty) page, and where to go on
    cluster.reads = 0
    page = await control.page(EndpointQuery(limit=2, phases=frozenset({"Ready", "Failed"})))
    assert ([r.id for r in page.items], cluster.reads) == (["ep-000", "ep-001"], 1)


async def test_kubernetes_without_limit_gives_every_record_in_one_read() -> None:
    cluster = PagingCluster(list(reversed(MANY)))
    page = await plane(cluster).page(EndpointQuery())
    assert [r.id for r in page.items] == [o["metadata"]["name"] for o in MANY]
    assert page.items[0].jobApiUrl == "/v2/ep-000/"  # full records
    assert (page.next, cluster.reads) == (None, 1)


async def test_kubernetes_an_expired_or_forged_apiserver_token_is_said_so() -> None:
    cluster = PagingCluster(MANY)
    control = plane(cluster)
    first = await control.page(EndpointQuery(limit=10))
    cluster.expired_before = 2  # etcd compacted the list's revision
    with pytest.raises(ContinueExpired):
        await control.page(EndpointQuery(limit=10, cursor=first.next))
    with pytest.raises(ContinueInvalid):
        await control.page(EndpointQuery(limit=10, cursor=Cursor(resume="1:x")))
