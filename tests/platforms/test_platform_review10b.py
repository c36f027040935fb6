"""Platforms: what a display that cannot serve the screens `gpus` spread players over is told."""

from __future__ import annotations

import os

import pytest

from renderd.platforms.linux64 import Linux64
from renderd.platforms.request import PlatformRequest


def _free_display_number() -> int:
    """A display number far above those Xvfb -displayfd hands out, with no lock file and no socket."""
    for number in range(5800, 5900):
        if not os.path.lexists(f"/tmp/.X{number}-lock") and not os.path.lexists(f"/tmp/.X11-unix/X{number}"):
            return number
    pytest.skip("no free display number in 5800..5899")


def _no_nvidia(monkeypatch) -> None:
    """As on a machine without NVIDIA GPUs (this one): ``gpus`` are then X screen numbers."""
    monkeypatch.setattr("renderd.platforms.gpus.nvidia_survey", lambda env: ([], None))


def test_an_unreachable_display_for_two_screens_is_one_reason_that_starts_both(monkeypatch):
    # With gpus spreading players over screens 0 and 1, an unreachable display was reported once per
    # screen: two reasons for one problem, the first telling to start a server with screen 0 only (the
    # check then fails again: screen 1 does not exist). It is one reason, whose server has both screens.
    _no_nvidia(monkeypatch)
    name = f":{_free_display_number()}"
    report = Linux64().check(PlatformRequest(x_display=name, gpus=(0, 1), width=64, height=48))
    assert not report.valid
    assert len(report.reasons) == 1, report.reasons
    [reason] = report.reasons
    assert f"X display {name} is not reachable" in reason
    assert f"Xvfb {name} -screen 0 64x48x24 -screen 1 64x48x24 +extension GLX" in reason, reason


@pytest.mark.xvfb
def test_a_display_without_glx_for_two_screens_says_so_once(xvfb, monkeypatch):
    _no_nvidia(monkeypatch)
    server = xvfb("-screen", "0", "64x48x24", "-screen", "1", "64x48x24", "-extension", "GLX")
    report = Linux64().check(PlatformRequest(x_display=server.name, gpus=(0, 1), width=64, height=48))
    assert not report.valid
    assert len(report.reasons) == 1, report.reasons
    assert f"X display {server.name} has no GLX extension" in report.reasons[0]


def _fake_nvidia_smi(directory) -> str:
    """A directory holding an ``nvidia-smi`` that lists one GPU (a real program, as the tool is run)."""
    tool = directory / "nvidia-smi"
    tool.write_text("#!/bin/sh\necho 'GPU 0: Fake GPU (UUID: GPU-00000000-1111-2222-3333-444444444444)'\n")
    tool.chmod(0o755)
    return str(directory)


def test_the_gpu_tool_output_cache_is_bounded(monkeypatch, tmp_path):
    # nvidia-smi's (and vulkaninfo's) output is cached per command and environment: a daemon whose
    # environments are reloaded with new settings for months kept every output it ever got.
    from renderd.platforms import gpus

    monkeypatch.setattr(gpus, "GPU_TOOL_CACHE_ENTRIES", 3, raising=False)
    path = f"{_fake_nvidia_smi(tmp_path)}:{os.defpath}"
    gpus.clear_cache()
    try:
        for i in range(6):
            devices, problem = gpus.nvidia_survey({"PATH": path, "CUDA_VISIBLE_DEVICES": str(i)})
            assert problem is None and [d.name for d in devices] == ["Fake GPU"]
            assert len(gpus._tool_cache) <= 3
        # the newest output is one of those kept (the key holds CUDA_VISIBLE_DEVICES after the command, path, PATH)
        assert "5" in [key[3] for key in gpus._tool_cache]
    finally:
        gpus.clear_cache()


def test_expired_gpu_tool_outputs_are_dropped(monkeypatch, tmp_path):
    from renderd.platforms import gpus

    monkeypatch.setattr(gpus, "GPU_TOOL_CACHE_SECONDS", 0.0)
    path = f"{_fake_nvidia_smi(tmp_path)}:{os.defpath}"
    gpus.clear_cache()
    try:
        for i in range(3):
            gpus.nvidia_survey({"PATH": path, "CUDA_VISIBLE_DEVICES": str(i)})
            assert len(gpus._tool_cache) <= 1  # older outputs had expired: dropped, not kept
    finally:
        gpus.clear_cache()
