"""The daemon's fronts: `server.Daemon` (the life cycle: lock, spool, watcher, both fronts), the
plugin's Unix socket (`socket_server`, a line per request: `handlers`, `protocol`, `client`), the
admin HTTP API (`http_api`, aiohttp on the daemon's loop, `http_auth` its bearer token)."""
