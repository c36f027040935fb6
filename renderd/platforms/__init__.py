"""Platforms: where a player can render, and what is missing when it cannot.

A :class:`PlatformRequest` says what is wanted (size, display, headless, GPUs); :func:`check` asks each
platform of the registry (Linux64, CloudRendering, OSXIntel64, headless) and gets a
:class:`PlatformReport` (valid, reasons with their fixes, instructions, details); :func:`select` walks
the candidates and returns a :class:`Selection` (environment, arguments, per-instance GPU spreading,
the managed display it holds) or raises :class:`renderd.errors.PlatformError`.
"""

from __future__ import annotations

from renderd.platforms.base import HEADLESS_ARGS, PLATFORM_ENV_VAR, Platform, Selection
from renderd.platforms.registry import PLATFORMS, get_platform
from renderd.platforms.request import PLATFORM_NAMES, PlatformReport, PlatformRequest
from renderd.platforms.selection import Decision, check, decide, describe_request, select

__all__ = [
    "HEADLESS_ARGS",
    "PLATFORMS",
    "PLATFORM_ENV_VAR",
    "PLATFORM_NAMES",
    "Platform",
    "PlatformReport",
    "PlatformRequest",
    "Selection",
    "Decision",
    "check",
    "clear_caches",
    "decide",
    "describe_request",
    "get_platform",
    "select",
]


def clear_caches() -> None:
    """Forget every cached probe result of this process (the Vulkan probe's, and the ``nvidia-smi``/``vulkaninfo``
    outputs and failures): the next selection probes again. A reload of the daemon calls it, so that a driver
    installed or fixed since is seen by the selections after it."""
    from renderd.platforms import gpus, vulkan

    vulkan.clear_cache()
    gpus.clear_cache()
