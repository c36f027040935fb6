"""Selection: the documented ``auto`` order, explicit platforms, errors that list every candidate, the
request's validation, OSXIntel64 bundles and the headless platform."""

from __future__ import annotations

import logging
import os
import plistlib
import shutil
import signal

import pytest

from renderd.errors import ConfigError, PlatformError, error_from_dict, error_to_dict
from renderd.platforms import PLATFORMS, PlatformRequest, check, decide, select, vulkan

# Larger than any display another test or a desktop would have, so that only what a test sets up counts.
BIG = {"width": 2001, "height": 1001}
NO_DISPLAY = {"DISPLAY": ""}
BAD_ICD = {"VK_ICD_FILENAMES": "/nonexistent.json"}
NO_XVFB = {"PATH": "/nonexistent"}


def vulkan_works() -> bool:
    return vulkan.probe_vulkan(dict(os.environ)).ok


def test_check_reports_every_platform():
    reports = check(PlatformRequest(system="Linux", **BIG, env=NO_DISPLAY))
    assert [r.name for r in reports] == list(PLATFORMS) == ["Linux64", "CloudRendering", "OSXIntel64", "headless"]
    assert all(isinstance(r.to_dict()["reasons"], list) for r in reports)


@pytest.mark.vulkan
def test_auto_without_a_display_prefers_vulkan():
    if not vulkan_works():
        pytest.skip("no Vulkan here")
    with select(PlatformRequest(system="Linux", **BIG, env=NO_DISPLAY)) as selection:
        assert selection.name == "CloudRendering"
        assert selection.env == {"RENDERD_PLATFORM": "CloudRendering"} and selection.display is None


@pytest.mark.xvfb
def test_auto_falls_back_to_a_managed_display(no_xvfb_left):
    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb is not installed")
    with select(PlatformRequest(system="Linux", **BIG, env={**NO_DISPLAY, **BAD_ICD})) as selection:
        assert selection.name == "Linux64"
        assert selection.display is not None and selection.display.alive()
        assert selection.display.width == 2001 and selection.env["DISPLAY"] == f"{selection.display.name}.0"
        assert selection.report.details["managed"] is True
    assert not selection.display.alive()


@pytest.mark.xvfb
def test_a_stopped_managed_display_is_stopped_by_its_sigterm(no_xvfb_left, caplog):
    # A hung (SIGSTOPped) Xvfb acts on no signal but SIGKILL and SIGCONT: it is continued with its SIGTERM, so
    # the release ends it at once, not after its whole grace and a SIGKILL.
    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb is not installed")
    caplog.set_level(logging.WARNING, logger="renderd")
    with select(PlatformRequest(system="Linux", **BIG, env={**NO_DISPLAY, **BAD_ICD})) as selection:
        assert selection.display is not None and selection.display.alive()
        os.kill(selection.display.pid, signal.SIGSTOP)
    assert not selection.display.alive()
    assert "ignored SIGTERM" not in caplog.text


def test_auto_with_nothing_lists_every_candidate():
    request = PlatformRequest(system="Linux", **BIG, env={**NO_DISPLAY, **BAD_ICD, **NO_XVFB})
    with pytest.raises(PlatformError) as info:
        select(request)
    error = info.value
    assert [r.name for r in error.reports] == ["Linux64", "CloudRendering"]
    assert all(not r.valid and r.reasons for r in error.reports)
    message = str(error)
    assert message.startswith("No platform can serve 2001x1001 on Linux, platform='auto'")
    assert "Xvfb is not installed; fix: install Xvfb" in message
    assert "VK_ICD_FILENAMES=/nonexistent.json" in message
    assert "To use Linux64:" in message
    # VK_ICD_FILENAMES naming no file hides the installed Vulkan: its reason says to unset it, and installing
    # Vulkan is not offered as the fix
    assert "or unset it" in message and "To use CloudRendering:" not in message
    assert "headless was not tried: it renders no images" in message
    # The message survives the control API's error form.
    again = error_from_dict(error_to_dict(error))
    assert isinstance(again, PlatformError) and str(again) == message


@pytest.mark.vulkan
def test_explicit_platform_names_alternatives():
    if not vulkan_works():
        pytest.skip("no Vulkan here")
    with pytest.raises(PlatformError) as info:
        select(PlatformRequest(platform="Linux64", system="Linux", x_display=":4093"))
    assert "Other platforms that can serve this request: CloudRendering" in str(info.value)
    assert info.value.reports[0].name == "Linux64"


def test_headless():
    for request in (
        PlatformRequest(system="Linux", headless=True, env=NO_XVFB),
        PlatformRequest(platform="headless", system="Linux"),
        PlatformRequest(platform="headless", system="Windows"),
    ):
        with select(request) as selection:
            assert selection.name == "headless" and selection.headless
            assert selection.args == ["-batchmode", "-nographics"]
            assert selection.env == {"RENDERD_PLATFORM": "headless"}


def test_unknown_system():
    with pytest.raises(PlatformError, match="renderd knows no platform for Windows"):
        select(PlatformRequest(system="Windows"))


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"platform": "WebGL"}, "platform"),
        ({"width": 0}, "width"),
        ({"height": -3}, "height"),
        ({"width": 1.5}, "width"),
        ({"gpus": (0, -1)}, "gpus"),
        ({"x_display": 0}, "x_display"),
    ],
)
def test_request_validation(kwargs, key):
    with pytest.raises(ConfigError) as info:
        PlatformRequest(**kwargs)
    assert info.value.key == key


def test_decide_has_no_side_effects():
    decision = decide(PlatformRequest(system="Linux", x_display="managed"))
    if shutil.which("Xvfb") is None:
        assert decision.chosen is None
    else:
        assert decision.chosen.name == "Linux64" and decision.chosen.details["managed"]


# -- OSXIntel64 (macOS cannot exist here: the system is given in the request, the bundle is real) ---------


def make_bundle(root, name="Game", executable="GameBinary", plist=True, binary=True):
    bundle = root / f"{name}.app"
    (bundle / "Contents" / "MacOS").mkdir(parents=True)
    if plist:
        with open(bundle / "Contents" / "Info.plist", "wb") as f:
            plistlib.dump({"CFBundleExecutable": executable, "CFBundleName": name}, f)
    if binary:
        path = bundle / "Contents" / "MacOS" / executable
        path.write_text("#!/bin/sh\n", encoding="utf-8")
        path.chmod(0o755)
    return bundle


def test_osx_bundle(tmp_path):
    bundle = make_bundle(tmp_path)
    for given in (str(bundle), str(tmp_path / "Game")):  # with or without the .app suffix
        with select(PlatformRequest(system="Darwin", executable=given)) as selection:
            assert selection.name == "OSXIntel64"
            assert selection.executable == str(bundle / "Contents" / "MacOS" / "GameBinary")
            assert selection.env == {"RENDERD_PLATFORM": "OSXIntel64"}


def test_osx_bundle_problems(tmp_path):
    no_plist = make_bundle(tmp_path / "a", plist=False)
    no_binary = make_bundle(tmp_path / "b", binary=False)
    for bundle, text in ((no_plist, "Info.plist does not exist"), (no_binary, "(CFBundleExecutable) does not exist")):
        with pytest.raises(PlatformError, match=text.replace("(", r"\(").replace(")", r"\)")):
            select(PlatformRequest(system="Darwin", executable=str(bundle)))


def test_osx_only_on_darwin(tmp_path):
    request = PlatformRequest(system="Linux", executable=str(make_bundle(tmp_path)), env=NO_DISPLAY)
    report = next(r for r in check(request) if r.name == "OSXIntel64")
    assert not report.valid and "macOS only (this system is Linux)" in report.reasons[0]
