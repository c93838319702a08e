"""Container registry credentials (`/v1/containerregistryauth`): what a create payload
holds, and the `.dockerconfigjson` a cluster keeps them in.

RunPod's payload is `{name, username, password}`; lockgate adds `registry`, the host the
credential is for, because a credential is made before any image names it (default
`docker.io`, Docker Hub, as `docker login` assumes).
"""

from __future__ import annotations

import base64
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

DOCKER_HUB = "docker.io"
# The key the kubelet (and `docker login`) file Docker Hub's credentials under.
DOCKER_HUB_KEY = "https://index.docker.io/v1/"
# A registry host with an optional port, as an image reference starts: no scheme, no path.
REGISTRY_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?(:[0-9]{1,5})?$"


class RegistryAuthSpec(BaseModel):
    """A credential as created: the password is kept (a Secret, or dev mode's Redis) and
    never shown."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., min_length=1, max_length=191, description="display name")
    username: str = Field(..., min_length=1, max_length=1024, description="registry user")
    password: str = Field(..., min_length=1, max_length=65536, description="password or token")
    registry: str = Field(
        DOCKER_HUB, pattern=REGISTRY_PATTERN, description="registry host[:port] (lockgate's)"
    )


def registry_auth_record(auth_id: str, entry: dict[str, Any]) -> dict[str, Any]:
    """What the API shows of a kept credential: never its password."""
    return {
        "id": auth_id,
        "name": entry.get("name", ""),
        "username": entry.get("username", ""),
        "registry": entry.get("registry", DOCKER_HUB),
    }


def docker_config(auth: RegistryAuthSpec) -> dict[str, Any]:
    """The `.dockerconfigjson` of a `kubernetes.io/dockerconfigjson` Secret."""
    server = DOCKER_HUB_KEY if auth.registry in (DOCKER_HUB, "index.docker.io") else auth.registry
    token = base64.b64encode(f"{auth.username}:{auth.password}".encode()).decode()
    entry = {"username": auth.username, "password": auth.password, "auth": token}
    return {"auths": {server: entry}}
