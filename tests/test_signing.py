"""Standard Webhooks signing: the spec's vector, round trips and every way to fail."""

from __future__ import annotations

import base64

import pytest

from lockgate.signing import (
    WebhookVerificationError,
    secret_key,
    sign,
    signature_headers,
    verify,
)
from lockgate.worker import verify_webhook

# The example of https://github.com/standard-webhooks/standard-webhooks (spec/standard-webhooks.md).
SPEC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SPEC_MSG_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SPEC_TIMESTAMP = 1614265330
SPEC_BODY = b'{"test": 2432232314}'
SPEC_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

NOW = 1_700_000_000
BODY = b'{"id": "job-1", "status": "COMPLETED"}'


def spec_headers(signature: str = SPEC_SIGNATURE) -> dict[str, str]:
    return {
        "webhook-id": SPEC_MSG_ID,
        "webhook-timestamp": str(SPEC_TIMESTAMP),
        "webhook-signature": signature,
    }


def test_signature_matches_the_standard_webhooks_example() -> None:
    assert sign(SPEC_SECRET, SPEC_MSG_ID, SPEC_TIMESTAMP, SPEC_BODY) == SPEC_SIGNATURE


def test_the_standard_webhooks_example_verifies() -> None:
    verify(SPEC_SECRET, spec_headers(), SPEC_BODY, now=SPEC_TIMESTAMP)


def test_whsec_secret_is_its_decoded_base64_and_a_plain_secret_its_utf8() -> None:
    assert secret_key("whsec_" + base64.b64encode(b"key").decode()) == b"key"
    assert secret_key("plain-sécret") == "plain-sécret".encode()


def test_whsec_secret_with_broken_base64_is_refused() -> None:
    with pytest.raises(ValueError, match="base64"):
        secret_key("whsec_not*base64")


def test_signed_headers_round_trip_with_a_plain_secret() -> None:
    headers = signature_headers("s3cret", BODY, msg_id="msg_1", timestamp=NOW)
    assert headers["webhook-id"] == "msg_1"
    assert headers["webhook-timestamp"] == str(NOW)
    verify("s3cret", headers, BODY, now=NOW)


def test_signed_headers_get_a_fresh_id_and_the_current_time_by_default() -> None:
    first = signature_headers(SPEC_SECRET, BODY)
    second = signature_headers(SPEC_SECRET, BODY)
    assert first["webhook-id"].startswith("msg_")
    assert first["webhook-id"] != second["webhook-id"]
    verify(SPEC_SECRET, first, BODY)


def test_tampered_body_is_rejected() -> None:
    headers = signature_headers(SPEC_SECRET, BODY, timestamp=NOW)
    with pytest.raises(WebhookVerificationError, match="no matching"):
        verify(SPEC_SECRET, headers, BODY.replace(b"COMPLETED", b"FAILED"), now=NOW)


def test_wrong_secret_is_rejected() -> None:
    headers = signature_headers(SPEC_SECRET, BODY, timestamp=NOW)
    with pytest.raises(WebhookVerificationError):
        verify("whsec_" + base64.b64encode(b"other").decode(), headers, BODY, now=NOW)


@pytest.mark.parametrize(("skew_s", "complaint"), [(301, "too old"), (-301, "in the future")])
def test_timestamp_beyond_the_tolerance_is_rejected(skew_s: int, complaint: str) -> None:
    headers = signature_headers(SPEC_SECRET, BODY, timestamp=NOW)
    with pytest.raises(WebhookVerificationError, match=complaint):
        verify(SPEC_SECRET, headers, BODY, now=NOW + skew_s)


def test_timestamp_within_the_tolerance_is_accepted() -> None:
    headers = signature_headers(SPEC_SECRET, BODY, timestamp=NOW)
    verify(SPEC_SECRET, headers, BODY, now=NOW + 299)
    verify(SPEC_SECRET, headers, BODY, now=NOW + 20, tolerance_s=30)


def test_any_one_of_several_signatures_may_match() -> None:
    several = f"v1,bm90LXRoaXM= v2,{SPEC_SIGNATURE[3:]} {SPEC_SIGNATURE}"
    verify(SPEC_SECRET, spec_headers(several), SPEC_BODY, now=SPEC_TIMESTAMP)


def test_a_matching_signature_under_another_version_does_not_count() -> None:
    other_version = SPEC_SIGNATURE.replace("v1,", "v1a,")
    with pytest.raises(WebhookVerificationError):
        verify(SPEC_SECRET, spec_headers(other_version), SPEC_BODY, now=SPEC_TIMESTAMP)


def test_non_ascii_signature_is_rejected_not_crashed_on() -> None:
    with pytest.raises(WebhookVerificationError):
        verify(SPEC_SECRET, spec_headers("v1,sïgnature"), SPEC_BODY, now=SPEC_TIMESTAMP)


def test_header_names_are_case_insensitive() -> None:
    shouted = {name.upper(): value for name, value in spec_headers().items()}
    verify(SPEC_SECRET, shouted, SPEC_BODY, now=SPEC_TIMESTAMP)


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_missing_header_is_named_in_the_error(missing: str) -> None:
    headers = spec_headers()
    del headers[missing]
    with pytest.raises(WebhookVerificationError, match=missing):
        verify(SPEC_SECRET, headers, SPEC_BODY, now=SPEC_TIMESTAMP)


def test_non_numeric_timestamp_is_rejected() -> None:
    headers = spec_headers() | {"webhook-timestamp": "yesterday"}
    with pytest.raises(WebhookVerificationError, match="integer"):
        verify(SPEC_SECRET, headers, SPEC_BODY, now=SPEC_TIMESTAMP)


def test_worker_sdk_verify_webhook_takes_headers_body_then_secret() -> None:
    headers = signature_headers("s3cret", BODY)
    verify_webhook(headers, BODY, "s3cret")
    with pytest.raises(WebhookVerificationError):
        verify_webhook(headers, BODY + b" ", "s3cret")
