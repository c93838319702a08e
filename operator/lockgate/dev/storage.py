"""`LocalStorage`: dev mode's registry credentials and network volumes.

Both are kept in the embedded Redis (`lg:registryauth`, `lg:volumes`), so they come back
when `lockgate dev` restarts. A credential's password is kept there too and never shown;
local workers are processes, not images, so no credential is ever used. A volume is a
folder, `<data dir>/volumes/<id>`, whose path local workers get as `RUNPOD_VOLUME_PATH`
(a process cannot see `/runpod-volume`); its size is kept and shown, not enforced.
"""

from __future__ import annotations

import asyncio
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lockgate.manage.storage import RecordExists, RecordNotFound
from lockgate.models.registryauth import RegistryAuthSpec, registry_auth_record
from lockgate.models.volumes import VOLUME_PATH_ENV, NetworkVolumeSpec
from lockgate.store import Registry, keys

__all__ = ["VOLUME_PATH_ENV", "LocalStorage", "volume_dir"]


def volume_dir(volumes_dir: Path, volume_id: str) -> Path:
    """The folder of a dev-mode network volume."""
    return volumes_dir / volume_id


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class LocalStorage:
    """Credentials and volumes in Redis, volume files under `volumes_dir`."""

    def __init__(self, registry: Registry, volumes_dir: Path) -> None:
        self.registry = registry
        self.volumes_dir = volumes_dir

    async def create_registry_auth(self, auth_id: str, auth: RegistryAuthSpec) -> None:
        entry = {**auth.model_dump(), "createdAt": _now()}
        if not await self.registry.add_record(keys.REGISTRY_AUTHS, auth_id, entry):
            raise RecordExists(auth_id)

    async def list_registry_auths(self) -> dict[str, dict[str, Any]]:
        stored = await self.registry.list_records(keys.REGISTRY_AUTHS)
        return {i: registry_auth_record(i, e) for i, e in sorted(stored.items())}

    async def delete_registry_auth(self, auth_id: str) -> None:
        if not await self.registry.delete_record(keys.REGISTRY_AUTHS, auth_id):
            raise RecordNotFound(auth_id)

    async def create_volume(self, volume_id: str, spec: NetworkVolumeSpec) -> None:
        entry = {**spec.model_dump(), "createdAt": _now()}
        if not await self.registry.add_record(keys.NETWORK_VOLUMES, volume_id, entry):
            raise RecordExists(volume_id)
        volume_dir(self.volumes_dir, volume_id).mkdir(parents=True, exist_ok=True)

    async def list_volumes(self) -> dict[str, NetworkVolumeSpec]:
        stored = await self.registry.list_records(keys.NETWORK_VOLUMES)
        fields = set(NetworkVolumeSpec.model_fields)
        return {
            i: NetworkVolumeSpec.model_validate({k: v for k, v in e.items() if k in fields})
            for i, e in sorted(stored.items())
        }

    async def replace_volume(self, volume_id: str, spec: NetworkVolumeSpec) -> None:
        stored = await self.registry.get_record(keys.NETWORK_VOLUMES, volume_id)
        if stored is None:
            raise RecordNotFound(volume_id)
        entry = {**spec.model_dump(), "createdAt": stored.get("createdAt", _now())}
        await self.registry.put_record(keys.NETWORK_VOLUMES, volume_id, entry)

    async def delete_volume(self, volume_id: str) -> None:
        if not await self.registry.delete_record(keys.NETWORK_VOLUMES, volume_id):
            raise RecordNotFound(volume_id)
        folder = volume_dir(self.volumes_dir, volume_id)
        await asyncio.to_thread(shutil.rmtree, folder, ignore_errors=True)
