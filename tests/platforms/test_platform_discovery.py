"""Display discovery against real Xvfb servers: renderd's own managed displays are never adopted by
discovery (this process's, or another process's), a frozen X server fails only itself, probe children
die with their owner; plus the Vulkan hint and cache keys."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from renderd.platforms import PlatformRequest, gpus, select, vulkan, x11
from renderd.platforms import xvfb as xvfb_mod
from renderd.platforms.linux64 import Linux64
from tests.helpers.leaks import Leaks, pid_gone, wait_for

GLX = ("+extension", "GLX")
#: Generous bound for a check that must not wait for a frozen server (the probe deadline is 10 s).
FAST = 5.0


def frozen(server):
    """SIGSTOP a test Xvfb: it still accepts connections (the listen backlog) but never answers."""
    os.kill(server.pid, signal.SIGSTOP)
    wait_for(lambda: psutil.Process(server.pid).status() == psutil.STATUS_STOPPED, 5, "the Xvfb to stop")


def thaw(server):
    if server.proc.poll() is None:
        os.kill(server.pid, signal.SIGCONT)


def spawn_owner(code: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def stop_owner(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            stream.close()


# -- 1. managed displays are recognised and never adopted by discovery ---------------------------------


@pytest.mark.xvfb
def test_managed_displays_are_recognised_by_their_process(no_xvfb_left, xvfb):
    plain = xvfb("-screen", "0", "64x64x24")
    manager = xvfb_mod.DisplayManager()
    try:
        with manager.acquire(64, 64) as display:
            assert xvfb_mod.managed_display_pid(display.number) == display.pid
            assert xvfb_mod.managed_display_pid(plain.number) is None
            assert xvfb_mod.is_managed_xvfb(display.pid) and not xvfb_mod.is_managed_xvfb(plain.pid)
        assert xvfb_mod.managed_display_pid(display.number) is None  # stopped: nothing to recognise
    finally:
        manager.shutdown()
    assert xvfb_mod.managed_display_pid(4093) is None


@pytest.mark.xvfb
def test_discovery_passes_over_this_process_managed_display(monkeypatch, no_xvfb_left):
    monkeypatch.delenv("DISPLAY", raising=False)
    owner_manager = xvfb_mod.DisplayManager()
    try:
        owner = owner_manager.acquire(320, 240)
        # platform="Linux64" without x_display: discovery, as in auto, but never CloudRendering.
        request = PlatformRequest(platform="Linux64", system="Linux", width=320, height=240)
        report = Linux64().check(request)
        assert report.valid, report.reasons
        assert report.details["display"] == "managed", report.details
        assert any(owner.name in n and "managed by renderd" in n for n in report.details["notes"]), report.details
        with select(request) as selection:
            assert selection.display is not None and selection.display.pid != owner.pid
            owner.release()
            assert wait_for(lambda: not owner.alive(), 10, "the owner's Xvfb to stop")
            env, _ = selection.for_instance(0)
            assert env["DISPLAY"] == selection.display.screen_name(0) and selection.display.alive()
            number = int(env["DISPLAY"][1:].split(".")[0])
            assert os.path.exists(os.path.join(x11.X11_SOCKET_DIR, f"X{number}"))
    finally:
        owner_manager.shutdown()


@pytest.mark.xvfb
def test_discovery_passes_over_another_process_managed_display(monkeypatch, no_xvfb_left, xvfb):
    monkeypatch.delenv("DISPLAY", raising=False)
    owner = spawn_owner(
        """
        import sys
        from renderd.platforms import xvfb
        with xvfb.DisplayManager().acquire(320, 240) as display:
            print(display.name, display.pid, flush=True)
            sys.stdin.read()
        """
    )
    try:
        name, pid = owner.stdout.readline().split()
        assert xvfb_mod.managed_display_pid(int(name[1:])) == int(pid)
        report = Linux64().check(PlatformRequest(platform="Linux64", system="Linux", width=320, height=240))
        assert report.valid and report.details["display"] == "managed", report.details
        assert any(name in n for n in report.details["notes"]), report.details
        # A user's display next to it is still discovered (and preferred to a managed one).
        user = xvfb("-screen", "0", "320x240x24", *GLX)
        report = Linux64().check(PlatformRequest(platform="Linux64", system="Linux", width=320, height=240))
        assert report.valid and report.details["display"] == f"{user.name}.0", report.details
        # Named explicitly, a managed display is used as before.
        for request in (
            PlatformRequest(system="Linux", width=320, height=240, x_display=name),
            PlatformRequest(system="Linux", width=320, height=240, env={"DISPLAY": name}),
        ):
            report = Linux64().check(request)
            assert report.valid and report.details["display"] == f"{name}.0", report.details
    finally:
        stop_owner(owner)
    assert wait_for(lambda: pid_gone(int(pid)), 10, "the other process's Xvfb to stop")


# -- 2. a frozen X server fails only itself ----------------------------------------------------------


@pytest.mark.xvfb
def test_a_frozen_display_does_not_fail_the_requested_one(no_xvfb_left, xvfb):
    good = xvfb("-screen", "0", "320x240x24", *GLX)
    stuck = xvfb("-screen", "0", "320x240x24", *GLX)
    frozen(stuck)
    try:
        leaks = Leaks(threads=True)
        started = time.monotonic()
        report = Linux64().check(PlatformRequest(system="Linux", width=320, height=240, env={"DISPLAY": good.name}))
        assert report.valid and report.details["display"] == f"{good.name}.0", report.details
        assert time.monotonic() - started < FAST
        report = Linux64().check(PlatformRequest(system="Linux", width=320, height=240, x_display=good.name))
        assert report.valid, report.reasons
        leaks.check()  # the frozen display's probe was killed, not left waiting

        facts = x11.probe_displays([stuck.name, good.name], {}, timeout=1.0)  # (a good display answers in ~0.1 s)
        assert facts[good.name].ok, facts[good.name]
        assert not facts[stuck.name].ok and "did not finish within 1 s" in facts[stuck.name].error
        leaks.check()
    finally:
        thaw(stuck)


@pytest.mark.xvfb
def test_discovery_keeps_the_displays_that_answered(monkeypatch, no_xvfb_left, xvfb):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.setattr(x11, "X11_PROBE_TIMEOUT", 1.0)  # (a good display answers in ~0.1 s)
    stuck = xvfb("-screen", "0", "320x240x24", *GLX)
    good = xvfb("-screen", "0", "320x240x24", *GLX)
    frozen(stuck)
    try:
        report = Linux64().check(PlatformRequest(platform="Linux64", system="Linux", width=320, height=240))
        assert report.valid and report.details["display"] == f"{good.name}.0", report.details
    finally:
        thaw(stuck)


# -- 3. probe children die with their owner ------------------------------------------------------------


def x11_probes_of(pid: int) -> list[psutil.Process]:
    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    found = []
    for kid in kids:
        try:
            if any(part.endswith("_x11probe.py") for part in kid.cmdline()):
                found.append(kid)
        except psutil.Error:
            pass
    return found


@pytest.mark.xvfb
def test_a_probe_dies_with_its_sigkilled_owner(no_xvfb_left, xvfb):
    stuck = xvfb("-screen", "0", "64x64x24")
    frozen(stuck)
    owner = spawn_owner(
        f"""
        from renderd.platforms import PlatformRequest
        from renderd.platforms.linux64 import Linux64
        Linux64().check(PlatformRequest(system="Linux", x_display={stuck.name!r}))
        """
    )
    probes: list[psutil.Process] = []
    try:
        probes = wait_for(lambda: x11_probes_of(owner.pid), 10, "the owner's X probe to start")
        owner.kill()
        owner.wait(10)
        for probe in probes:
            wait_for(lambda pid=probe.pid: pid_gone(pid), 3, f"the orphaned probe {probe.pid} to die")
    finally:
        for probe in probes:
            try:
                probe.kill()
            except psutil.Error:
                pass
        stop_owner(owner)
        thaw(stuck)


@pytest.mark.parametrize("tool", ["nvidia-smi", "vulkaninfo"])
def test_a_gpu_tool_dies_with_its_sigkilled_owner(tmp_path, tool):
    # A GPU tool that never answers (a wedged driver) must not outlive the daemon that ran it.
    pid_file = tmp_path / "tool.pid"
    fake = tmp_path / tool
    fake.write_text(f"#!/bin/sh\necho $$ > {pid_file}.tmp && mv {pid_file}.tmp {pid_file}\nexec sleep 600\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    call = "nvidia_devices" if tool == "nvidia-smi" else "vulkaninfo_devices"
    owner = spawn_owner(
        f"""
        from renderd.platforms import gpus
        gpus.{call}({{"PATH": {str(tmp_path) + os.pathsep + os.environ.get("PATH", "")!r}}})
        """
    )
    tool_pid = None
    try:
        wait_for(pid_file.exists, 10, f"the fake {tool} to start")
        tool_pid = int(pid_file.read_text())
        owner.kill()
        owner.wait(10)
        wait_for(lambda: pid_gone(tool_pid), 3, f"the orphaned {tool} {tool_pid} to die")
    finally:
        if tool_pid is not None and not pid_gone(tool_pid):
            os.kill(tool_pid, signal.SIGKILL)
        stop_owner(owner)


# -- 4, 5. Vulkan: the variable the loader used; cache keys ---------------------------------------------


def test_icd_hint_names_the_variable_the_loader_used(tmp_path):
    manifest = tmp_path / "icd.json"
    manifest.write_text("{}")
    hint, fix = vulkan._icd_hint({"VK_ICD_FILENAMES": str(manifest), "VK_DRIVER_FILES": "/nonexistent.json"})
    assert "VK_DRIVER_FILES=/nonexistent.json names /nonexistent.json" in hint
    assert "VK_ICD_FILENAMES is ignored while VK_DRIVER_FILES is set" in hint
    assert fix.startswith("point VK_DRIVER_FILES at")
    hint, fix = vulkan._icd_hint({"VK_ICD_FILENAMES": "/gone.json", "VK_ADD_DRIVER_FILES": str(manifest)})
    assert "VK_ICD_FILENAMES=/gone.json" in hint and "VK_ADD_DRIVER_FILES is ignored" in hint
    hint, fix = vulkan._icd_hint({"VK_ADD_DRIVER_FILES": "/gone.json"})
    assert "VK_ADD_DRIVER_FILES=/gone.json" in hint and "ignored" not in hint


def test_icd_hint_for_a_variable_set_but_naming_no_file(tmp_path):
    # The loader (libvulkan1 1.3.239) uses an empty VK_DRIVER_FILES / VK_ICD_FILENAMES: it loads no driver.
    manifest = tmp_path / "icd.json"
    manifest.write_text("{}")
    hint, fix = vulkan._icd_hint({"VK_ICD_FILENAMES": ""})
    assert "VK_ICD_FILENAMES is set but empty" in hint and fix.startswith("unset VK_ICD_FILENAMES")
    hint, fix = vulkan._icd_hint({"VK_DRIVER_FILES": "", "VK_ICD_FILENAMES": str(manifest)})
    assert "VK_DRIVER_FILES is set but empty" in hint and "VK_ICD_FILENAMES is ignored" in hint
    assert fix.startswith("unset VK_DRIVER_FILES")
    hint, fix = vulkan._icd_hint({"VK_ICD_FILENAMES": os.pathsep})
    assert "which names no file" in hint and fix.startswith("unset VK_ICD_FILENAMES")
    # An empty VK_ADD_DRIVER_FILES adds nothing and hides nothing: not the cause.
    hint, fix = vulkan._icd_hint({"VK_ADD_DRIVER_FILES": ""})
    assert hint == " (no Vulkan driver (ICD) was found)" and fix == vulkan.DRIVER_FIX


@pytest.mark.parametrize(
    "name",
    ["VK_DRIVER_FILES", "VK_ADD_DRIVER_FILES", "VK_ICD_FILENAMES", "XDG_DATA_DIRS", "XDG_CONFIG_DIRS",
     "XDG_DATA_HOME", "XDG_CONFIG_HOME", "HOME"],
)
def test_loader_variables_are_in_the_cache_key(name):
    assert vulkan.loader_env_key({name: "/a"}) != vulkan.loader_env_key({name: "/b"})
    assert vulkan.loader_env_key({"UNRELATED": "/a"}) == vulkan.loader_env_key({"UNRELATED": "/b"})


def test_vulkan_probe_cache_sees_xdg_data_dirs(tmp_path):
    base = {k: v for k, v in os.environ.items() if k not in ("VK_DRIVER_FILES", "VK_ICD_FILENAMES")}
    # No manifest under XDG_DATA_DIRS, XDG_CONFIG_DIRS or HOME: the loader finds no driver.
    empty = dict(base, XDG_DATA_DIRS=str(tmp_path), XDG_CONFIG_DIRS=str(tmp_path), HOME=str(tmp_path))
    empty.pop("XDG_DATA_HOME", None)
    empty.pop("XDG_CONFIG_HOME", None)
    first = vulkan.probe_vulkan(base, use_cache=False)
    if not first.ok or not first.devices:
        pytest.skip(f"no Vulkan device here: {first.error}")
    if vulkan.probe_vulkan(empty, use_cache=False).devices:
        pytest.skip("this loader finds its driver outside the XDG directories")
    vulkan.clear_cache()
    try:
        assert vulkan.probe_vulkan(base).devices == first.devices
        assert not vulkan.probe_vulkan(empty).devices  # not the cached answer for ``base``
    finally:
        vulkan.clear_cache()


def test_tool_cache_is_keyed_on_the_loader_variables(tmp_path):
    tool = tmp_path / "vulkaninfo"
    tool.write_text(
        "#!/bin/sh\n"
        'echo "GPU0:"; echo "\tdeviceName = dev-for-${VK_DRIVER_FILES:-none}-${XDG_DATA_DIRS:-none}"\n'
    )
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    base = {"PATH": str(tmp_path)}
    gpus.clear_cache()
    try:
        names = [
            gpus.vulkaninfo_devices(dict(base, **extra))[0].name
            for extra in ({"VK_DRIVER_FILES": "/a.json"}, {"VK_DRIVER_FILES": "/b.json"}, {"XDG_DATA_DIRS": "/x"})
        ]
        assert names == ["dev-for-/a.json-none", "dev-for-/b.json-none", "dev-for-none-/x"]
    finally:
        gpus.clear_cache()


@pytest.mark.parametrize("tool", ["nvidia-smi", "vulkaninfo"])
def test_a_gpu_tool_that_times_out_leaves_no_process_behind(tmp_path, monkeypatch, tool):
    # A tool that hangs in a helper of its own (a wrapper script, a driver helper): the deadline kills
    # the whole tool, not only the process renderd started, and does not wait for the helper.
    pid_file = tmp_path / "helper.pid"
    fake = tmp_path / tool
    fake.write_text(f"#!/bin/sh\nsleep 600 &\necho $! > {pid_file}.tmp && mv {pid_file}.tmp {pid_file}\nwait\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(gpus, "GPU_TOOL_TIMEOUT", 0.5)
    call = gpus.nvidia_devices if tool == "nvidia-smi" else gpus.vulkaninfo_devices
    gpus.clear_cache()
    helper = None
    try:
        started = time.monotonic()
        assert call({"PATH": str(tmp_path) + os.pathsep + os.environ.get("PATH", "")}) == []
        assert time.monotonic() - started < FAST
        helper = int(pid_file.read_text())
        wait_for(lambda: pid_gone(helper), 3, f"the helper {helper} of the timed-out {tool} to die")
    finally:
        gpus.clear_cache()
        if helper is not None and not pid_gone(helper):
            os.kill(helper, signal.SIGKILL)


def test_a_gpu_tool_that_timed_out_is_asked_again(tmp_path, monkeypatch):
    # nvidia-smi can be slow once (driver initialisation without persistence mode): a missed deadline
    # must not stand for "no NVIDIA GPU" for the whole cache period.
    marker = tmp_path / "ran-once"
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        f"#!/bin/sh\nif [ ! -e {marker} ]; then touch {marker}; exec sleep 600; fi\n"
        "echo 'GPU 0: NVIDIA A100 (UUID: GPU-5d5ba0d6-1111-2222-3333-444455556666)'\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(gpus, "GPU_TOOL_TIMEOUT", 0.5)
    env = {"PATH": str(tmp_path) + os.pathsep + os.environ.get("PATH", "")}
    gpus.clear_cache()
    try:
        assert gpus.nvidia_devices(env) == []
        assert [d.name for d in gpus.nvidia_devices(env)] == ["NVIDIA A100"]
    finally:
        gpus.clear_cache()
