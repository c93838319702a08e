"""The gateway: client job API, worker API and metrics over one Redis (aiohttp)."""

from lockgate.gateway.app import create_app

__all__ = ["create_app"]
