"""CloudRendering on lab GPU servers: a driver manifest whose library is missing, a driver that hangs in
the loader, and a broken GPU driver next to lavapipe. Real Vulkan loader, real probe children."""

from __future__ import annotations

import json
import os
import threading

import pytest

from renderd.errors import PlatformError
from renderd.platforms import PlatformRequest, check, select, vulkan

#: A driver library no machine has (as libGLX_nvidia.so.0 in a container started without `graphics`).
MISSING_LIBRARY = "librenderd-missing-driver-review16r.so.0"
LAVAPIPE_MANIFEST = "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json"


def cloud(request: PlatformRequest):
    return next(r for r in check(request) if r.name == "CloudRendering")


def _manifest(path, library: str) -> str:
    path.write_text(json.dumps({"file_format_version": "1.0.0", "ICD": {"library_path": library, "api_version": "1.3.0"}}))
    return str(path)


@pytest.fixture
def search_root(tmp_path):
    """An environment in which the loader searches only ``tmp_path`` (and /etc/vulkan/icd.d) for drivers."""
    data = tmp_path / "share"
    (data / "vulkan" / "icd.d").mkdir(parents=True)
    (tmp_path / "etc").mkdir()
    env = {"XDG_DATA_DIRS": str(data), "XDG_CONFIG_DIRS": str(tmp_path / "etc"), "HOME": str(tmp_path)}
    vulkan.clear_cache()
    yield data / "vulkan" / "icd.d", env
    vulkan.clear_cache()


def _env(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment without its Vulkan and XDG settings, with ``extra``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("VK_", "XDG_"))}
    base.update(extra)
    return base


@pytest.mark.vulkan
def test_an_installed_manifest_whose_library_is_missing_is_named_not_no_driver(search_root, monkeypatch):
    icd_dir, extra = search_root
    manifest = _manifest(icd_dir / "nvidia_icd.json", MISSING_LIBRARY)
    monkeypatch.setattr(os, "environ", _env(extra))
    report = cloud(PlatformRequest(system="Linux"))
    assert not report.valid
    (reason,) = report.reasons
    assert "no Vulkan driver (ICD) was found" not in reason, reason
    assert manifest in reason and MISSING_LIBRARY in reason and "cannot be loaded" in reason, reason
    assert "cannot open shared object file" in reason, reason
    with pytest.raises(PlatformError) as info:
        select(PlatformRequest(platform="CloudRendering", system="Linux"))
    assert manifest in str(info.value)


@pytest.mark.vulkan
def test_a_broken_gpu_driver_next_to_lavapipe_is_noted(search_root, monkeypatch):
    if not os.path.exists(LAVAPIPE_MANIFEST):
        pytest.skip("lavapipe (mesa-vulkan-drivers) is not installed")
    icd_dir, extra = search_root
    manifest = _manifest(icd_dir / "nvidia_icd.json", MISSING_LIBRARY)
    with open(LAVAPIPE_MANIFEST, encoding="utf-8") as f:
        (icd_dir / "lvp_icd.x86_64.json").write_text(f.read())
    monkeypatch.setattr(os, "environ", _env(extra))
    report = cloud(PlatformRequest(system="Linux"))
    assert report.valid, report.reasons
    assert all(d["type"] == "CPU" for d in report.details["vulkan_devices"])
    notes = " ".join(report.details.get("notes", []))
    assert manifest in notes and MISSING_LIBRARY in notes and "CPU" in notes, report.details


@pytest.mark.vulkan
def test_a_driver_that_hangs_in_the_loader_is_named_with_the_stage(tmp_path):
    # dlopen of a FIFO blocks in open(): a driver that never returns from the loader's vkCreateInstance.
    fifo = tmp_path / "driver.so"
    os.mkfifo(fifo)
    manifest = _manifest(tmp_path / "hang.json", str(fifo))
    env = _env({"VK_DRIVER_FILES": manifest})
    vulkan.clear_cache()
    result: list[vulkan.VulkanProbe] = []
    worker = threading.Thread(target=lambda: result.append(vulkan.probe_vulkan(env, timeout=3.0)))
    worker.start()
    try:
        worker.join(30)
        assert result, "the probe did not return"
    finally:
        if worker.is_alive():  # unblock the probe's open() so the thread ends
            with open(fifo, "wb"):
                pass
        worker.join(30)
        vulkan.clear_cache()
    probe = result[0]
    assert not probe.ok
    assert "did not finish within 3 s" in probe.error, probe.error
    assert "vkCreateInstance" in probe.error and manifest in probe.error, probe.error
