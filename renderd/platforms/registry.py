"""The platforms by name: a table of import strings, so adding a platform is one line and a platform's
module is imported only when it is asked about."""

from __future__ import annotations

import importlib
import threading

from renderd.platforms.base import Platform

#: name -> "module:class", in the order ``renderd doctor`` shows them.
PLATFORMS: dict[str, str] = {
    "Linux64": "renderd.platforms.linux64:Linux64",
    "CloudRendering": "renderd.platforms.cloudrendering:CloudRendering",
    "OSXIntel64": "renderd.platforms.osx:OSXIntel64",
    "headless": "renderd.platforms.headless:Headless",
}

_instances: dict[str, Platform] = {}
_lock = threading.Lock()


def get_platform(name: str) -> Platform:
    """The platform called ``name``. Raises ``KeyError`` for a name not in :data:`PLATFORMS`."""
    with _lock:
        platform = _instances.get(name)
        if platform is None:
            module, _, attr = PLATFORMS[name].partition(":")
            platform = getattr(importlib.import_module(module), attr)()
            _instances[name] = platform
        return platform
