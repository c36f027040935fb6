"""The nvidia-smi and vulkaninfo outputs renderd caches: a driver fixed or installed after the daemon started
is seen at the next check (a reload), not five minutes later. Stand-in tools (no NVIDIA GPU can exist here)."""

from __future__ import annotations

import os
import stat
import sys

import pytest

from renderd.platforms import gpus


def _tool(directory, name: str, body: str) -> None:
    path = directory / name
    path.write_text(f"#!{sys.executable}\n{body}", encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def tools(tmp_path):
    gpus.clear_cache()
    yield tmp_path, {"PATH": f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}"}
    gpus.clear_cache()


def test_a_failing_nvidia_smi_is_asked_again_once_the_driver_is_fixed(tools):
    directory, env = tools
    _tool(directory, "nvidia-smi", "print('Failed to initialize NVML: Driver/library version mismatch')\nraise SystemExit(18)\n")
    devices, problem = gpus.nvidia_survey(env)
    assert devices == [] and "Driver/library version mismatch" in problem
    # the driver's kernel module is reloaded: nvidia-smi works now
    _tool(directory, "nvidia-smi", "print('GPU 0: NVIDIA A100 (UUID: GPU-5d5ba0d6-1111-2222-3333-444444444444)')\n")
    devices, problem = gpus.nvidia_survey(env)
    assert problem is None and [d.name for d in devices] == ["NVIDIA A100"], problem


def test_vulkaninfo_is_asked_again_when_the_drivers_on_disk_change(tools):
    directory, env = tools
    icd = directory / "icd.d"
    icd.mkdir()
    env = dict(env, VK_ADD_DRIVER_FILES=str(icd), XDG_DATA_DIRS=str(directory / "share"))
    _tool(directory, "vulkaninfo", "print('GPU0:\\n\\tdeviceName = llvmpipe\\n\\tdeviceType = PHYSICAL_DEVICE_TYPE_CPU')\n")
    assert [d.name for d in gpus.vulkaninfo_devices(env)] == ["llvmpipe"]
    # the NVIDIA driver is installed: its manifest appears, and vulkaninfo lists the GPU too
    (icd / "nvidia_icd.json").write_text('{"file_format_version": "1.0.0", "ICD": {"library_path": "libGLX_nvidia.so.0"}}')
    _tool(
        directory, "vulkaninfo",
        "print('GPU0:\\n\\tdeviceName = NVIDIA A100\\n\\tdeviceType = PHYSICAL_DEVICE_TYPE_DISCRETE_GPU\\n"
        "GPU1:\\n\\tdeviceName = llvmpipe\\n\\tdeviceType = PHYSICAL_DEVICE_TYPE_CPU')\n",
    )
    assert [d.name for d in gpus.vulkaninfo_devices(env)] == ["NVIDIA A100", "llvmpipe"]
