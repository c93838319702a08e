"""The console's chart values, rendered by real helm: `operator.manage.console.catalogue`
reaches `lockgate manage` as LOCKGATE_CONSOLE_CATALOGUE, read back as the catalogue
`/v1/about` shows; empty by default; the schema refuses an entry that is no http(s) URL."""

from __future__ import annotations

import pytest

from lockgate.settings import ConsoleSettings, catalogue_of
from tests import test_chart
from tests.test_chart import RenderError, by_kind, env_of, helm_lint

# test_chart's fixtures: real helm and `helm template` of the chart.
helm = test_chart.helm
render_chart = test_chart.render_chart


def manage_env(docs) -> dict:
    pod = by_kind(docs, "Deployment")["lockgate-manage"]["spec"]["template"]["spec"]
    return env_of(pod["containers"][0])


def test_the_catalogue_reaches_the_management_api(render_chart, monkeypatch) -> None:
    catalogue = [
        {"url": "https://git.example.test/org/llm.git", "ref": "v1", "title": "An LLM"},
        {"url": "http://git.example.test/org/echo.git"},
    ]
    env = manage_env(render_chart({"operator": {"manage": {"console": {"catalogue": catalogue}}}}))
    monkeypatch.setenv("LOCKGATE_CONSOLE_CATALOGUE", env["LOCKGATE_CONSOLE_CATALOGUE"])
    assert catalogue_of(ConsoleSettings()) == (
        catalogue[0], {"url": catalogue[1]["url"], "ref": "", "title": ""})  # fmt: skip
    default = manage_env(render_chart())["LOCKGATE_CONSOLE_CATALOGUE"]
    monkeypatch.setenv("LOCKGATE_CONSOLE_CATALOGUE", default)
    assert (default, catalogue_of(ConsoleSettings())) == ("[]", ())


@pytest.mark.parametrize(
    "entry",
    [
        {"url": "file:///srv/repo"},
        {"url": "git@git.example.test:org/r.git"},
        {"title": "no url"},
        {"url": "https://git.example.test/r.git", "branch": "main"},
    ],
)
def test_the_schema_refuses_a_catalogue_entry_the_server_could_not_fetch(
    render_chart, entry: dict
) -> None:
    with pytest.raises(RenderError, match="catalogue"):
        render_chart({"operator": {"manage": {"console": {"catalogue": [entry]}}}})


def test_helm_lint_strict_passes_with_a_catalogue(helm: str, tmp_path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(
        "operator:\n  manage:\n    console:\n      catalogue:\n"
        "        - {url: 'https://git.example.test/org/llm.git', title: An LLM}\n"
    )
    done = helm_lint(helm, "-f", str(values))
    assert done.returncode == 0, done.stdout + done.stderr
