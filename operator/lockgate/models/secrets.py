"""Account secrets (RunPod's `/v2/account/secrets`, docs/secrets.md): the name rules, the
`{{ RUNPOD_SECRET_<name> }}` reference an env value may be, and how a secret's name maps
to its id and to the Kubernetes Secret that holds its value.

Both maps are pure functions of the name, so the operator finds the Secret an env value
refers to without asking anyone: the id is the first 60 bits of the name's SHA-256 (base32,
12 characters, as short as RunPod's ids), the Secret `account-secret-<slug>-<id>` (the slug
is the name lowercased with every other character a `-`, for `kubectl get secrets`; the id
keeps `HF_TOKEN` and `hf-token` apart). The value is the Secret's `value` key.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict

NAME_PATTERN = r"^[a-zA-Z_][a-zA-Z0-9_.\-/]*$"  # RunPod's
NAME_MAX = 191
VALUE_MAX = 16_777_216  # characters (RunPod: 1..16777216, under 16 MiB of UTF-8)
DESCRIPTION_MAX_BYTES = 65_535
RESERVED_PREFIX = "RUNPOD"  # a name may not start with it, in any case

# An env value that is a reference, and nothing else: `{{ RUNPOD_SECRET_hf-token }}`, the
# spaces inside the braces optional. A reference inside other text is not one (it stays as
# written): Kubernetes can only hand a variable a whole Secret value.
REFERENCE = re.compile(r"^\{\{\s*RUNPOD_SECRET_([a-zA-Z_][a-zA-Z0-9_.\-/]*)\s*\}\}$")

SECRET_PREFIX = "account-secret-"  # the Kubernetes Secret's name starts so
SLUG_MAX = 40  # of the name in the Secret's name: 15 + 40 + 1 + 12 characters at most
VALUE_KEY = "value"  # the Secret's data key holding the value
ID_LABEL = "lockgate.dev/account-secret"  # its label: the secret's id
NAME_ANNOTATION = "lockgate.dev/account-secret-name"  # its annotation: the RunPod name


def name_problem(name: str) -> str | None:
    """Why `name` cannot name a secret (RunPod's rules), or None."""
    if not 1 <= len(name) <= NAME_MAX:
        return f"must be 1 to {NAME_MAX} characters"
    if not re.fullmatch(NAME_PATTERN, name):
        return "must start with a letter or '_' and hold only letters, digits and _ . - /"
    if name.upper().startswith(RESERVED_PREFIX):
        return f"names starting with {RESERVED_PREFIX} (in any case) are reserved"
    return None


def referenced_name(value: str) -> str | None:
    """The secret an env value refers to (`{{ RUNPOD_SECRET_<name> }}`), or None."""
    found = REFERENCE.fullmatch(value.strip())
    return found.group(1) if found else None


def references(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of `env` whose value is a reference, with the secret each names."""
    return {var: name for var, value in env.items() if (name := referenced_name(value))}


def missing_problem(name: str) -> str:
    """Why no worker starts while the account secret `name` an env value refers to does
    not exist (RunPod: "deployments fail"; here the endpoint waits and says so)."""
    return (
        f"account secret {name!r} not found: create it (POST /v2/account/secrets), or "
        "change the variable that refers to it"
    )


def secret_id(name: str) -> str:
    """The secret's id: 12 lowercase base32 characters of its name's SHA-256."""
    digest = hashlib.sha256(name.encode()).digest()
    return base64.b32encode(digest).decode()[:12].lower()


def object_name(name: str) -> str:
    """The Kubernetes Secret holding the value of the secret `name` (a DNS subdomain)."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:SLUG_MAX].strip("-")
    return f"{SECRET_PREFIX}{slug + '-' if slug else ''}{secret_id(name)}"


class SecretRecord(BaseModel):
    """What is kept of a secret beside its value (Redis, `lg:secrets`), and shown."""

    model_config = ConfigDict(extra="ignore")

    name: str
    description: str | None = None
    createdAt: str
    valueLastUpdatedAt: str | None = None

    def view(self) -> dict[str, object]:
        """RunPod's `Secret` object: never the value."""
        return {"id": secret_id(self.name), **self.model_dump()}


def description_problem(description: str | None) -> str | None:
    """Why `description` is too long (RunPod counts UTF-8 bytes), or None."""
    if description is not None and len(description.encode()) > DESCRIPTION_MAX_BYTES:
        return f"must be at most {DESCRIPTION_MAX_BYTES} bytes of UTF-8"
    return None
