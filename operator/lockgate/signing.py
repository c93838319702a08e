"""Standard Webhooks signing (https://www.standardwebhooks.com), standard library only.

The gateway signs each webhook call with `signature_headers`; a receiver checks it with
`verify` (re-exported as `lockgate.worker.verify_webhook`). A signature is
`v1,<base64 HMAC-SHA256 of "{msg_id}.{timestamp}." + body>`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
import uuid
from collections.abc import Mapping

SECRET_PREFIX = "whsec_"
SIGNATURE_VERSION = "v1"
DEFAULT_TOLERANCE_S = 300  # seconds a timestamp may lie in the past or future


class WebhookVerificationError(Exception):
    """The webhook's headers or signature do not check out."""


def secret_key(secret: str) -> bytes:
    """Return the HMAC key: the base64 part of `whsec_…` secrets, else the UTF-8 bytes."""
    if not secret.startswith(SECRET_PREFIX):
        return secret.encode()
    try:
        return base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except binascii.Error as err:
        raise ValueError("webhook secret after 'whsec_' is not valid base64") from err


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """Return the `v1,<base64>` signature of one message."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret_key(secret), signed, hashlib.sha256).digest()
    return f"{SIGNATURE_VERSION},{base64.b64encode(digest).decode()}"


def signature_headers(
    secret: str, body: bytes, *, msg_id: str | None = None, timestamp: int | None = None
) -> dict[str, str]:
    """Return the three Standard Webhooks headers for a call carrying `body`."""
    msg_id = msg_id or f"msg_{uuid.uuid4().hex}"
    timestamp = int(time.time()) if timestamp is None else timestamp
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(secret, msg_id, timestamp, body),
    }


def verify(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    tolerance_s: int = DEFAULT_TOLERANCE_S,
    now: float | None = None,
) -> None:
    """Return if one of the call's signatures matches; raise `WebhookVerificationError` if not."""
    lowered = {name.lower(): value for name, value in headers.items()}
    msg_id = _required(lowered, "webhook-id")
    timestamp = _timestamp(_required(lowered, "webhook-timestamp"), tolerance_s, now)
    expected = sign(secret, msg_id, timestamp, body).partition(",")[2].encode()
    for entry in _required(lowered, "webhook-signature").split():
        version, _, signature = entry.partition(",")
        # Bytes, not str: compare_digest rejects non-ASCII str, and the header is untrusted.
        if version == SIGNATURE_VERSION and hmac.compare_digest(signature.encode(), expected):
            return
    raise WebhookVerificationError("no matching webhook signature")


def _required(headers: Mapping[str, str], name: str) -> str:
    value = headers.get(name)
    if not value:
        raise WebhookVerificationError(f"missing header {name}")
    return value


def _timestamp(raw: str, tolerance_s: int, now: float | None) -> int:
    try:
        timestamp = int(raw)
    except ValueError as err:
        raise WebhookVerificationError("webhook-timestamp is not an integer") from err
    now = time.time() if now is None else now
    if timestamp < now - tolerance_s:
        raise WebhookVerificationError("webhook timestamp is too old")
    if timestamp > now + tolerance_s:
        raise WebhookVerificationError("webhook timestamp is in the future")
    return timestamp
