"""Which device a player gets when CUDA_VISIBLE_DEVICES hides every GPU, when gpus name a CPU Vulkan device,
and what NVIDIA_VISIBLE_DEVICES in the environment's env does (nothing): a stand-in nvidia-smi (no NVIDIA GPU
can exist here), the real Vulkan probe."""

from __future__ import annotations

import os
import stat
import sys

import pytest

from renderd.platforms import PlatformRequest, check, gpus, vulkan
from renderd.platforms.vulkan import VulkanDevice

#: A GPU whose UUID no Vulkan device here has.
STAND_IN = "GPU 0: NVIDIA Stand-in (UUID: GPU-00000000-1111-2222-3333-444444444444)"


def cloud(request: PlatformRequest):
    return next(r for r in check(request) if r.name == "CloudRendering")


def cpu_device() -> VulkanDevice:
    probe = vulkan.probe_vulkan(dict(os.environ))
    cpu = [d for d in probe.devices if d.type == "CPU"] if probe.ok else []
    if not cpu:
        pytest.skip(f"no CPU Vulkan device (lavapipe) here: {probe.error}")
    return cpu[0]


@pytest.fixture
def fake_nvidia_smi(tmp_path):
    fake = tmp_path / "nvidia-smi"
    fake.write_text(f"#!{sys.executable}\nprint({STAND_IN!r})\n", encoding="utf-8")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    gpus.clear_cache()
    yield {"PATH": f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}"}
    gpus.clear_cache()


@pytest.mark.vulkan
@pytest.mark.parametrize("value", ["", "-1"])
def test_cuda_visible_devices_that_hides_every_gpu_renders_on_the_cpu_device(fake_nvidia_smi, value):
    # CUDA_VISIBLE_DEVICES=-1 (or empty) is how a process is kept off the GPUs; its player must not pick one.
    cpu = cpu_device()
    report = cloud(PlatformRequest(system="Linux", env=dict(fake_nvidia_smi, CUDA_VISIBLE_DEVICES=value)))
    assert report.valid, report.reasons
    assert report.details["device_indices"] == [cpu.index], report.details
    notes = " ".join(report.details.get("notes", []))
    assert "no GPU is visible" in notes and "CPU" in notes, notes


def test_no_visible_gpu_and_no_cpu_device_is_a_reason():
    cuda = gpus.parse_nvidia_smi(STAND_IN)
    plan = gpus.plan_vulkan((), "-1", cuda, [VulkanDevice(0, "NVIDIA Other", "DISCRETE_GPU", "aa" * 16)])
    assert plan.slots == [] and plan.reasons, plan
    assert "CUDA_VISIBLE_DEVICES='-1'" in plan.reasons[0] and "fix:" in plan.reasons[0]


def test_gpus_naming_a_cpu_vulkan_device_next_to_a_gpu_are_noted():
    # Without nvidia-smi gpus are Vulkan indices: one that lands on lavapipe while a GPU exists is said.
    devices = [VulkanDevice(0, "llvmpipe (LLVM 15.0.6, 256 bits)", "CPU"), VulkanDevice(1, "NVIDIA A100", "DISCRETE_GPU")]
    plan = gpus.plan_vulkan((0,), None, [], devices)
    assert plan.slots == [0]
    assert any("llvmpipe" in n and "CPU" in n and "NVIDIA A100" in n for n in plan.notes), plan.notes


@pytest.mark.vulkan
def test_nvidia_visible_devices_in_env_is_said_to_do_nothing():
    cpu_device()
    report = cloud(PlatformRequest(system="Linux", env={"NVIDIA_VISIBLE_DEVICES": "1"}))
    notes = " ".join(report.details.get("notes", []))
    assert "NVIDIA_VISIBLE_DEVICES" in notes and "container" in notes and "gpus" in notes, report.details
