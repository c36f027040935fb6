"""GPU spreading: parsing nvidia-smi and vulkaninfo (recorded outputs), the CUDA -> Vulkan mapping by
UUID, CUDA_VISIBLE_DEVICES, and round-robin per instance."""

from __future__ import annotations

import os
import stat
import sys

import pytest

from renderd.platforms import PlatformRequest, check, gpus, select, vulkan
from renderd.platforms.base import Selection
from renderd.platforms.cloudrendering import CloudRendering
from renderd.platforms.request import PlatformReport
from renderd.platforms.vulkan import VulkanDevice

from .conftest import fixture_text


@pytest.fixture
def two():
    return (
        gpus.parse_nvidia_smi(fixture_text("nvidia-smi-L-2gpu.txt")),
        gpus.parse_vulkaninfo(fixture_text("vulkaninfo-2gpu.txt")),
    )


@pytest.fixture
def four():
    return (
        gpus.parse_nvidia_smi(fixture_text("nvidia-smi-L-4gpu.txt")),
        gpus.parse_vulkaninfo(fixture_text("vulkaninfo-summary-4gpu.txt")),
    )


def test_parse_nvidia_smi():
    devices = gpus.parse_nvidia_smi(fixture_text("nvidia-smi-L-2gpu.txt"))
    assert [(d.index, d.name) for d in devices] == [(0, "NVIDIA GeForce RTX 3090"), (1, "NVIDIA RTX A6000")]
    assert devices[0].uuid == "0a4c3b7e5f218d3a91c27e6b4f2d1a90"


def test_parse_nvidia_smi_skips_mig_lines():
    devices = gpus.parse_nvidia_smi(fixture_text("nvidia-smi-L-mig.txt"))
    assert [d.index for d in devices] == [0, 1]


def test_parse_vulkaninfo_full_text(two):
    _, devices = two
    assert [(d.index, d.name, d.type) for d in devices] == [
        (0, "NVIDIA RTX A6000", "DISCRETE_GPU"),
        (1, "NVIDIA GeForce RTX 3090", "DISCRETE_GPU"),
    ]
    assert devices[0].uuid == "c91f07d2-3b8e-4a65-b0d4-58e2a9c7f316"


def test_parse_vulkaninfo_summary(four):
    _, devices = four
    assert len(devices) == 5
    assert devices[4].type == "CPU" and devices[4].name.startswith("llvmpipe")
    assert devices[0].uuid == "9b27d4e1-0c6a-45f8-b3d2-6e1a8f4c7d05"


def test_parse_vulkaninfo_of_this_machine_matches_the_probe():
    import subprocess

    try:
        out = subprocess.run(["vulkaninfo", "--summary"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        pytest.skip("vulkaninfo is not available")
    probe = vulkan.probe_vulkan(dict(os.environ))
    if not probe.ok:
        pytest.skip(f"no Vulkan here: {probe.error}")
    parsed = gpus.parse_vulkaninfo(out)
    assert [(d.index, d.name, d.uuid) for d in parsed] == [(d.index, d.name, d.uuid) for d in probe.devices]


def test_mapping_two_gpus_in_different_orders(two):
    cuda, vk = two
    assert gpus.map_cuda_to_vulkan(cuda, vk) == {0: 1, 1: 0}


def test_mapping_four_gpus_and_a_cpu_device(four):
    cuda, vk = four
    assert gpus.map_cuda_to_vulkan(cuda, vk) == {0: 1, 1: 3, 2: 0, 3: 2}


@pytest.mark.parametrize(
    "value, expected, truncated",
    [
        (None, [0, 1, 2, 3], False),
        ("", [], True),
        ("2,0", [2, 0], False),
        (" 3 , 1 ", [3, 1], False),
        ("GPU-e4a81f3c", [3], False),  # a unique UUID prefix
        ("GPU-9b27d4e1-0c6a-45f8-b3d2-6e1a8f4c7d05,1", [2, 1], False),
        ("1,7,2", [1], True),  # CUDA stops at the first invalid entry
        ("0,-1,2", [0], True),
        ("1,1", [1], True),
        ("MIG-2e6f1a3b-0c4d-5e7f-8a9b-1c2d3e4f5a6b", [], True),
    ],
)
def test_cuda_visible_devices(four, value, expected, truncated):
    cuda, _ = four
    visible, notes = gpus.apply_cuda_visible_devices(cuda, value)
    assert [d.index for d in visible] == expected
    assert bool(notes) == truncated


def test_ambiguous_uuid_prefix_ends_the_list(four):
    cuda, _ = four
    visible, notes = gpus.apply_cuda_visible_devices(cuda, "GPU-")
    assert visible == [] and "matches 4 GPUs" in notes[0]


def test_plan_vulkan_spreads_over_the_requested_gpus(four):
    cuda, vk = four
    plan = gpus.plan_vulkan([0, 1, 2, 3], None, cuda, vk)
    assert plan.slots == [1, 3, 0, 2] and not plan.reasons
    assert "nvidia-smi 2" in plan.labels[2] and "vulkan 0" in plan.labels[2]


def test_plan_vulkan_indexes_the_cuda_visible_list(four):
    cuda, vk = four
    # CUDA_VISIBLE_DEVICES=2,3: gpus 0 and 1 are the physical GPUs 2 and 3.
    assert gpus.plan_vulkan([0, 1], "2,3", cuda, vk).slots == [0, 2]
    # No gpus given: every visible GPU, in CUDA order.
    assert gpus.plan_vulkan([], "3,0", cuda, vk).slots == [2, 1]
    # Neither: no spreading, Unity picks.
    assert gpus.plan_vulkan([], None, cuda, vk).slots == []


def test_plan_vulkan_reasons(four, two):
    cuda, vk = four
    plan = gpus.plan_vulkan([0, 2], "1,2", cuda, vk)
    assert plan.slots == [3] and "GPU 2 was asked for but 2 GPU(s) are visible" in plan.reasons[0]
    # A GPU whose UUID has no Vulkan device (no NVIDIA ICD): named, with the fix.
    plan = gpus.plan_vulkan([0], None, cuda, [d for d in vk if d.type == "CPU"])
    assert "no Vulkan device with the same UUID" in plan.reasons[0] and "nvidia_icd.json" in plan.reasons[0]


def test_plan_vulkan_without_nvidia_uses_vulkan_indices():
    vk = [VulkanDevice(0, "llvmpipe", "CPU", None)]
    assert gpus.plan_vulkan([0], None, [], vk).slots == [0]
    plan = gpus.plan_vulkan([1], "0", [], vk)
    assert "Vulkan lists 1 device(s)" in plan.reasons[0] and plan.notes


def test_plan_screens(four):
    cuda, _ = four
    assert gpus.plan_screens([0, 1], "3,1", cuda).slots == [3, 1]
    assert gpus.plan_screens([1, 0], None, []).slots == [1, 0]
    assert gpus.plan_screens([5], None, cuda).reasons


def test_for_instance_round_robin(four):
    cuda, vk = four
    request = PlatformRequest(platform="CloudRendering", system="Linux", gpus=(0, 1, 2))
    plan = gpus.plan_vulkan(request.gpus, None, cuda, vk)
    report = PlatformReport("CloudRendering", True, [], "", {"device_indices": plan.slots, "gpu_slots": plan.labels})
    selection = CloudRendering().prepare(request, report)
    assert isinstance(selection, Selection)
    got = [selection.for_instance(i)[1] for i in range(5)]
    assert got == [["-force-device-index", str(v)] for v in (1, 3, 0, 1, 3)]
    assert selection.for_instance(4)[0] == {"RENDERD_PLATFORM": "CloudRendering"}
    with pytest.raises(ValueError):
        selection.for_instance(-1)


@pytest.mark.vulkan
def test_select_with_gpus_end_to_end(tmp_path):
    """nvidia-smi cannot exist here: a stand-in prints one GPU whose UUID is this machine's Vulkan device's,
    and select() maps it through the real Vulkan probe to -force-device-index."""
    probe = vulkan.probe_vulkan(dict(os.environ))
    if not probe.ok or not probe.devices or not probe.devices[0].uuid:
        pytest.skip(f"no Vulkan device with a UUID here: {probe.error}")
    device = probe.devices[-1]
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        f"#!{sys.executable}\nprint('GPU 0: NVIDIA Stand-in (UUID: GPU-{device.uuid})')\n", encoding="utf-8"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    gpus.clear_cache()
    env = {"PATH": f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}", "CUDA_VISIBLE_DEVICES": "0"}
    try:
        with select(PlatformRequest(platform="CloudRendering", system="Linux", env=env)) as selection:
            assert selection.for_instance(0)[1] == ["-force-device-index", str(device.index)]
            assert selection.describe_slots()[0].endswith(f"vulkan {device.index}")
        with pytest.raises(Exception) as info:
            select(PlatformRequest(platform="CloudRendering", system="Linux", gpus=(1,), env=env))
        assert "GPU 1 was asked for but 1 GPU(s) are visible" in str(info.value)
    finally:
        gpus.clear_cache()


@pytest.mark.vulkan
def test_a_failing_nvidia_smi_is_said_not_taken_for_no_nvidia_gpu(tmp_path):
    """nvidia-smi installed but failing (after a driver upgrade without a reboot): gpus cannot be mapped
    through CUDA indices and are taken as Vulkan indices; the report says so and why, instead of
    silently counting the GPUs another way."""
    probe = vulkan.probe_vulkan(dict(os.environ))
    if not probe.ok or not probe.devices:
        pytest.skip(f"no Vulkan device here: {probe.error}")
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'Failed to initialize NVML: Driver/library version mismatch'\nexit 18\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    env = {"PATH": f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}"}
    gpus.clear_cache()
    try:
        report = next(r for r in check(PlatformRequest(system="Linux", gpus=(0,), env=env)) if r.name == "CloudRendering")
    finally:
        gpus.clear_cache()
    notes = " ".join(report.details.get("notes", []))
    assert "nvidia-smi" in notes and "Driver/library version mismatch" in notes, report.details
    assert "Vulkan device indices" in notes, notes
