"""renderd: run Unity-built simulators on headless servers and hand their frames to agents.

``renderd.launch()`` spawns and owns one player; ``renderd.connect()`` leases a ready player from the
daemon. Both return a :class:`Session` whose ``step()`` returns an :class:`Event`.
"""

from __future__ import annotations

import importlib
from typing import Any

from renderd.errors import (
    AlreadyPendingCallError,
    CallOrderError,
    ConfigError,
    LeaseBusyError,
    LeaseError,
    NoPendingCallError,
    PlatformError,
    PlayerCrashed,
    PlayerTimeout,
    ProtocolError,
    RenderdError,
    os_error_message,
)

__version__ = "0.1.0"

# Public names that live in heavier modules, imported on first use so `import renderd` stays cheap: it
# imports no numpy, so a program inside the package (`renderd-player`) installs its signal handlers
# within milliseconds of starting instead of after numpy's few hundred.
_LAZY = {
    "Event": "renderd.event",
    "launch": "renderd.client",
    "connect": "renderd.client",
    "Session": "renderd.client",
    "launch_many": "renderd.vector",
    "connect_many": "renderd.vector",
    "VectorSession": "renderd.vector",
}

__all__ = [
    "AlreadyPendingCallError",
    "CallOrderError",
    "ConfigError",
    "LeaseBusyError",
    "LeaseError",
    "NoPendingCallError",
    "PlatformError",
    "PlayerCrashed",
    "PlayerTimeout",
    "ProtocolError",
    "RenderdError",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'renderd' has no attribute {name!r}")
    try:
        imported = importlib.import_module(module)
    except OSError as exc:
        # Importing reads the module's files: a process with no descriptor left (at its RLIMIT_NOFILE) gets EMFILE
        # from inside the import machinery, which names neither renderd nor what to do. (Nothing is kept of the
        # failed import: the next use of the name imports it again.)
        raise RenderdError(
            os_error_message(exc, f"renderd.{name} could not be loaded: importing {module} opens its files")
            + "; close some files, or import renderd's modules (renderd.client, renderd.vector) before opening many"
        ) from exc
    value = getattr(imported, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
