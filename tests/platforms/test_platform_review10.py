"""The Vulkan probe's result cache stays bounded, however many loader environments are probed."""

from __future__ import annotations

import os

from renderd.platforms import vulkan


def test_the_vulkan_probe_cache_is_bounded(monkeypatch, tmp_path):
    # Each distinct loader environment (and each state of the drivers on disk) is a cache key: a daemon
    # whose environments are reloaded with new settings for months must not keep every result it ever got.
    monkeypatch.setattr(vulkan, "VULKAN_PROBE_CACHE_ENTRIES", 3, raising=False)
    vulkan.clear_cache()
    try:
        for i in range(6):
            env = {**os.environ, "VK_ICD_FILENAMES": str(tmp_path / f"missing-{i}.json")}
            assert not vulkan.probe_vulkan(env).ok
            assert len(vulkan._cache) <= 3
        # the newest results are the ones kept
        newest = {**os.environ, "VK_ICD_FILENAMES": str(tmp_path / "missing-5.json")}
        key = (vulkan.loader_env_key(newest), vulkan.driver_fingerprint(newest))
        assert key in vulkan._cache
    finally:
        vulkan.clear_cache()


def test_expired_vulkan_probe_results_are_dropped(monkeypatch, tmp_path):
    monkeypatch.setattr(vulkan, "VULKAN_PROBE_CACHE_SECONDS", 0.0)
    vulkan.clear_cache()
    try:
        for i in range(3):
            env = {**os.environ, "VK_ICD_FILENAMES": str(tmp_path / f"missing-{i}.json")}
            vulkan.probe_vulkan(env)
            assert len(vulkan._cache) <= 1  # older results had expired: dropped, not kept
    finally:
        vulkan.clear_cache()
