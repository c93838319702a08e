"""`make bench`: lockgate's performance figures beside a bare aiohttp echo server."""
