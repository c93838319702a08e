"""What worker pods use beside their template: registry credentials and network volumes.
The `Storage` protocol, its errors, and the management app's key for it (`STORAGE`).

Dev mode's `LocalStorage` (`dev.storage`) keeps both in Redis, a volume's files in a
folder under the data dir; `KubernetesStorage` (`kube.storage`) writes a credential's
password into a `kubernetes.io/dockerconfigjson` Secret (its name, username and registry
in Redis: the management API may write Secrets but read none) and makes a
PersistentVolumeClaim per volume. The API (`manage.storage_api`) checks payloads, ids and
who uses what; a backend only keeps, lists and removes.
"""

from __future__ import annotations

from typing import Any, Protocol

from aiohttp import web

from lockgate.models.registryauth import RegistryAuthSpec
from lockgate.models.volumes import NetworkVolumeSpec


class RecordNotFound(LookupError):
    """No credential or volume has this id."""


class RecordExists(ValueError):
    """A credential or volume with this id exists already."""


class StorageRefused(ValueError):
    """Valid settings the backend refused (e.g. a resize its StorageClass does not
    allow); the message names the field."""


class Storage(Protocol):
    """Registry credentials and network volumes, by id. Settings arrive validated."""

    async def create_registry_auth(self, auth_id: str, auth: RegistryAuthSpec) -> None:
        """Keep a new credential; raises `RecordExists`."""
        ...

    async def list_registry_auths(self) -> dict[str, dict[str, Any]]:
        """Every credential by id: `name`, `username`, `registry`; never the password."""
        ...

    async def delete_registry_auth(self, auth_id: str) -> None:
        """Forget a credential (and its Secret); raises `RecordNotFound`."""
        ...

    async def create_volume(self, volume_id: str, spec: NetworkVolumeSpec) -> None:
        """Make a new volume; raises `RecordExists`."""
        ...

    async def list_volumes(self) -> dict[str, NetworkVolumeSpec]:
        """Every volume by id."""
        ...

    async def replace_volume(self, volume_id: str, spec: NetworkVolumeSpec) -> None:
        """A new name or a larger size; raises `RecordNotFound` (or `StorageRefused`)."""
        ...

    async def delete_volume(self, volume_id: str) -> None:
        """Delete a volume and its files; raises `RecordNotFound`."""
        ...


# The management app's registry credentials and volumes: set by `create_manage_app`.
STORAGE = web.AppKey("storage", Storage)
