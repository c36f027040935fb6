"""CloudRendering and GPUs, ninth review: a Vulkan driver put in place after a failed check is seen by the next
check; a report says when CUDA may count the GPUs in another order than renderd; what is installed is not
offered as the fix; a headless CloudRendering player needs no Vulkan."""

from __future__ import annotations

import glob
import json
import os
import stat
import sys

import pytest
from click.testing import CliRunner

from renderd.platforms import gpus, select, vulkan
from renderd.platforms.cloudrendering import CloudRendering
from renderd.platforms.doctor import doctor_command
from renderd.platforms.request import PlatformRequest

from .conftest import fixture_text


def _working_manifest() -> dict:
    """An installed ICD manifest whose driver enumerates a device here (lavapipe), or skip."""
    probe = vulkan.probe_vulkan(dict(os.environ))
    if not probe.ok or not probe.devices:
        pytest.skip("no Vulkan device here (apt-get install libvulkan1 mesa-vulkan-drivers)")
    for path in sorted(glob.glob("/usr/share/vulkan/icd.d/lvp_icd*.json")):
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    pytest.skip("lavapipe's ICD manifest is not installed (apt-get install mesa-vulkan-drivers)")


def test_a_driver_installed_after_a_failed_check_is_seen_by_the_next_one(tmp_path):
    # The probe's answer was cached for five minutes per environment, whatever the answer: a manifest put at
    # the path VK_ICD_FILENAMES names after a check said it does not exist (or a driver installed after "no
    # Vulkan driver was found") kept that reason, now false, for every check of the next five minutes, and
    # auto chose another platform meanwhile.
    manifest = _working_manifest()
    path = tmp_path / "icd.json"
    request = PlatformRequest(platform="CloudRendering", env={"VK_ICD_FILENAMES": str(path)})
    vulkan.clear_cache()
    try:
        before = CloudRendering().check(request)
        assert not before.valid and f"names {path}, which does not exist" in before.reasons[0], before.reasons
        path.write_text(json.dumps(manifest), encoding="utf-8")
        after = CloudRendering().check(request)
        assert after.valid, after.reasons
        assert after.details["devices"], after.details
        # the answer for an unchanged driver set is still reused
        assert vulkan.probe_vulkan(request.environ()) is vulkan.probe_vulkan(request.environ())
        path.unlink()
        gone = CloudRendering().check(request)
        assert not gone.valid and "does not exist" in gone.reasons[0], gone.reasons
    finally:
        vulkan.clear_cache()


# -- CUDA's device order ------------------------------------------------------------------------------------


def _recorded_two_gpus():
    # an RTX 3090 (nvidia-smi 0) and an RTX A6000 (nvidia-smi 1): not alike, so CUDA's default order
    # (fastest first) need not be nvidia-smi's PCI bus order
    return (
        gpus.parse_nvidia_smi(fixture_text("nvidia-smi-L-2gpu.txt")),
        gpus.parse_vulkaninfo(fixture_text("vulkaninfo-2gpu.txt")),
    )


def _order_notes(plan) -> list[str]:
    return [n for n in plan.notes if "CUDA_DEVICE_ORDER" in n]


def test_gpus_of_different_models_counted_in_bus_order_are_said_to_need_pci_bus_id():
    # gpus (and CUDA_VISIBLE_DEVICES indices) were documented as CUDA's indices but taken in nvidia-smi's PCI
    # bus order, which CUDA counts in only with CUDA_DEVICE_ORDER=PCI_BUS_ID (or identical GPUs): by default
    # it counts fastest first, so on a machine with different models a player silently rendered on another
    # GPU than the one the caller's CUDA code calls gpu 0.
    cuda, vk = _recorded_two_gpus()
    [note] = _order_notes(gpus.plan_vulkan([0], None, cuda, vk))
    assert "NVIDIA GeForce RTX 3090" in note and "NVIDIA RTX A6000" in note and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in note
    assert _order_notes(gpus.plan_vulkan([], "1", cuda, vk))  # an index in CUDA_VISIBLE_DEVICES: the same
    assert _order_notes(gpus.plan_screens([1], None, cuda))
    # PCI_BUS_ID: both count alike; GPUs named by UUID, or identical ones: nothing depends on the order
    assert not _order_notes(gpus.plan_vulkan([0], None, cuda, vk, device_order="PCI_BUS_ID"))
    assert not _order_notes(gpus.plan_screens([1], None, cuda, device_order="PCI_BUS_ID"))
    by_uuid = ",".join(f"GPU-{d.uuid}" for d in reversed(cuda))
    assert not _order_notes(gpus.plan_vulkan([0, 1], by_uuid, cuda, vk))
    assert not _order_notes(gpus.plan_vulkan([], None, cuda, vk))  # no spreading: the player picks
    four = gpus.parse_nvidia_smi(fixture_text("nvidia-smi-L-4gpu.txt"))
    assert not _order_notes(gpus.plan_screens([0, 3], None, four))


@pytest.mark.vulkan
def test_a_report_on_gpus_of_different_models_says_how_cuda_counts_them(tmp_path):
    probe = vulkan.probe_vulkan(dict(os.environ))
    if not probe.ok or not probe.devices or not probe.devices[0].uuid:
        pytest.skip(f"no Vulkan device with a UUID here: {probe.error}")
    device = probe.devices[0]
    fake = tmp_path / "nvidia-smi"  # nvidia-smi cannot exist here: a stand-in, its GPU 0 this machine's device
    fake.write_text(
        f"#!{sys.executable}\nprint('GPU 0: NVIDIA Stand-in (UUID: GPU-{device.uuid})')\n"
        "print('GPU 1: NVIDIA Other Model (UUID: GPU-00000000-0000-0000-0000-000000000001)')\n",
        encoding="utf-8",
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    path = f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}"
    gpus.clear_cache()
    try:
        report = CloudRendering().check(PlatformRequest(platform="CloudRendering", gpus=(0,), env={"PATH": path}))
        assert report.valid and report.details["device_indices"] == [device.index], report
        assert [n for n in report.details.get("notes", []) if "CUDA_DEVICE_ORDER=PCI_BUS_ID" in n], report.details
        env = {"PATH": path, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        report = CloudRendering().check(PlatformRequest(platform="CloudRendering", gpus=(0,), env=env))
        assert report.valid and not report.details.get("notes"), report.details
    finally:
        gpus.clear_cache()


# -- what to install -----------------------------------------------------------------------------------------


@pytest.mark.vulkan
def test_a_setting_that_hides_the_installed_vulkan_is_not_told_to_install_it():
    # VK_ICD_FILENAMES naming no file hides the installed drivers: the reason says to unset it or point it at
    # a manifest, but the report (and doctor, and the PlatformError) went on "To use CloudRendering: install
    # the Vulkan loader and a driver: apt-get install libvulkan1 mesa-vulkan-drivers", which changes nothing.
    _working_manifest()
    vulkan.clear_cache()
    try:
        hidden = CloudRendering().check(PlatformRequest(env={"VK_ICD_FILENAMES": "/nonexistent.json"}))
        assert not hidden.valid and "unset it" in hidden.reasons[0], hidden.reasons
        assert hidden.instructions == "" and "apt-get install" not in hidden.describe(), hidden.describe()
        # a GPU index Vulkan does not list: Vulkan works, there is nothing to install either
        beyond = CloudRendering().check(PlatformRequest(gpus=(7,)))
        assert not beyond.valid and "GPU 7 was asked for" in beyond.reasons[0], beyond.reasons
        assert beyond.instructions == "" and "apt-get install" not in beyond.describe(), beyond.describe()
        result = CliRunner().invoke(
            doctor_command, ["--platform", "CloudRendering"], env={"VK_ICD_FILENAMES": "/nonexistent.json"}
        )
        assert result.exit_code == 1 and "unset it" in result.output, result.output
        assert "install the Vulkan loader" not in result.output, result.output
    finally:
        vulkan.clear_cache()


@pytest.mark.vulkan
def test_a_machine_without_a_vulkan_driver_is_still_told_to_install_one(tmp_path):
    # the loader's search directories hold no manifest (XDG_DATA_DIRS points at an empty one): no driver is
    # installed as far as Vulkan can tell, and installing one is the fix
    _working_manifest()
    empty = str(tmp_path)
    env = {"XDG_DATA_DIRS": empty, "XDG_CONFIG_DIRS": empty, "HOME": empty}
    vulkan.clear_cache()
    try:
        report = CloudRendering().check(PlatformRequest(env=env))
    finally:
        vulkan.clear_cache()
    if report.valid or "no Vulkan driver (ICD) was found" not in report.reasons[0]:
        pytest.skip(f"a Vulkan driver outside the XDG directories here: {report.reasons or report.details}")
    assert report.instructions == vulkan.INSTALL_HINT and "To use CloudRendering: install" in report.describe()


# -- headless ------------------------------------------------------------------------------------------------


def test_a_headless_cloudrendering_player_needs_no_vulkan():
    # -batchmode -nographics renders nothing: Linux64 asks for no display then, but CloudRendering still
    # probed Vulkan and refused a headless request on a machine without it (here: VK_ICD_FILENAMES hides it).
    request = PlatformRequest(platform="CloudRendering", headless=True, env={"VK_ICD_FILENAMES": "/nonexistent.json"})
    vulkan.clear_cache()
    try:
        report = CloudRendering().check(request)
        assert report.valid, report.reasons
        assert "headless" in report.details.get("note", ""), report.details
        with select(request) as selection:
            assert selection.name == "CloudRendering" and selection.headless
            assert selection.for_instance(0) == ({"RENDERD_PLATFORM": "CloudRendering"}, ["-batchmode", "-nographics"])
    finally:
        vulkan.clear_cache()
