"""Log amplification: client-supplied values are cut in error bodies and log lines, so a
refused request with megabytes of URL or text costs kilobytes of log, not megabytes."""

from __future__ import annotations

import logging

import pytest

from lockgate.gateway.errors import clip
from tests.conftest import LiveGateway

MB = 1024 * 1024


def test_clip_keeps_short_text_and_cuts_long_text_saying_how_long_it_was() -> None:
    assert clip("short") == "short"
    cut = clip("x" * 10_000, 100)
    assert cut.startswith("x" * 100) and "10000 characters" in cut and len(cut) < 150


@pytest.mark.parametrize(
    "body",
    [
        {"input": {}, "webhook": "https://" + "a" * (5 * MB) + ".example.com/hook"},
        {"input": {}, "webhook": "https://example.com/" + "p" * (5 * MB)},
        {"input": {}, "policy": {"ttl": "x" * (5 * MB)}},
    ],
    ids=["long-host", "long-path", "long-value"],
)
async def test_a_refused_request_with_megabytes_of_text_costs_kilobytes_of_body_and_log(
    http, gateway: LiveGateway, caplog: pytest.LogCaptureFixture, body: dict
) -> None:
    caplog.set_level(logging.DEBUG)
    async with http.post(gateway.job_url("run"), json=body, headers=gateway.client_headers()) as r:
        status, text = r.status, await r.text()
    assert status == 400, text[:300]
    assert len(text) < 4096, f"a {len(text)} byte error body"
    logged = sum(len(r.getMessage()) + len(str(getattr(r, "fields", ""))) for r in caplog.records)
    assert logged < 16 * 1024, f"{logged} characters of log for one refused request"
