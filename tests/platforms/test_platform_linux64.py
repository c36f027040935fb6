"""Linux64 against real Xvfb servers started by the tests: valid, 16-bit depth, too small, no GLX, a bad
display name, a missing screen, discovery through $DISPLAY and sockets, and screens per GPU."""

from __future__ import annotations

import pytest

from renderd.errors import PlatformError
from renderd.platforms import PlatformRequest, check, select, x11

pytestmark = pytest.mark.xvfb

GLX = ("+extension", "GLX")


def linux64(request: PlatformRequest):
    return next(r for r in check(request) if r.name == "Linux64")


def test_valid_display(xvfb):
    server = xvfb("-screen", "0", "640x480x24", *GLX)
    report = linux64(PlatformRequest(system="Linux", width=640, height=480, x_display=server.name))
    assert report.valid, report.reasons
    assert report.details["display"] == f"{server.name}.0"
    with select(PlatformRequest(system="Linux", width=320, height=240, x_display=f"{server.name}.0")) as selection:
        assert selection.name == "Linux64"
        assert selection.env == {"RENDERD_PLATFORM": "Linux64", "DISPLAY": f"{server.name}.0"}
        assert selection.args == [] and selection.display is None


def test_depth_16(xvfb):
    server = xvfb("-screen", "0", "640x480x16", *GLX)
    report = linux64(PlatformRequest(system="Linux", x_display=server.name))
    assert not report.valid
    assert any("colour depth 16, Unity needs 24" in r and "fix:" in r for r in report.reasons), report.reasons


def test_too_small(xvfb):
    server = xvfb("-screen", "0", "200x150x24", *GLX)
    report = linux64(PlatformRequest(system="Linux", width=300, height=300, x_display=server.name))
    assert not report.valid
    assert any("is 200x150, smaller than the requested 300x300" in r for r in report.reasons), report.reasons


def test_no_glx(xvfb):
    server = xvfb("-screen", "0", "640x480x24", "-extension", "GLX")
    report = linux64(PlatformRequest(system="Linux", x_display=server.name))
    assert not report.valid
    assert any("has no GLX extension" in r and "+extension GLX" in r for r in report.reasons), report.reasons


def test_several_problems_are_all_reported(xvfb):
    server = xvfb("-screen", "0", "100x100x16", "-extension", "GLX")
    report = linux64(PlatformRequest(system="Linux", x_display=server.name))
    assert len(report.reasons) == 3, report.reasons


@pytest.mark.parametrize("name", ["not-a-display", "", ":x", "host:"])
def test_bad_display_name(name):
    report = linux64(PlatformRequest(system="Linux", x_display=name))
    assert not report.valid
    assert "is not an X display name" in report.reasons[0]


def test_unreachable_display():
    report = linux64(PlatformRequest(system="Linux", x_display=":4093"))
    assert not report.valid
    assert "X display :4093 is not reachable" in report.reasons[0] and 'x_display="managed"' in report.reasons[0]


def test_non_existent_screen(xvfb):
    server = xvfb("-screen", "0", "640x480x24", *GLX)
    report = linux64(PlatformRequest(system="Linux", x_display=f"{server.name}.3"))
    assert not report.valid
    assert report.reasons == [
        f"screen 3 does not exist on X display {server.name} (it has 1 screen: 0..0); fix: use a screen below 1, "
        f"or start the X server with more screens (Xvfb {server.name} -screen 0 ... -screen 3 300x300x24)"
    ]


def test_error_lists_the_reasons_and_the_fix(xvfb):
    server = xvfb("-screen", "0", "640x480x16", *GLX)
    with pytest.raises(PlatformError) as info:
        select(PlatformRequest(system="Linux", x_display=server.name))
    message = str(info.value)
    assert "colour depth 16" in message and "To use Linux64:" in message and "only Linux64 was considered" in message
    assert [r.name for r in info.value.reports] == ["Linux64"]


def test_discovery_through_display_variable(xvfb):
    server = xvfb("-screen", "0", "320x240x16", "-screen", "1", "320x240x24", *GLX)
    # Screen 0 is 16-bit; discovery takes the first usable screen of $DISPLAY.
    report = linux64(PlatformRequest(system="Linux", width=320, height=240, env={"DISPLAY": server.name}))
    assert report.valid and report.details["display"] == f"{server.name}.1"
    assert server.name in x11.socket_displays()


def test_auto_prefers_an_existing_valid_display(xvfb):
    server = xvfb("-screen", "0", "333x222x24", *GLX)
    with select(PlatformRequest(system="Linux", width=333, height=222, env={"DISPLAY": server.name})) as selection:
        assert selection.name == "Linux64" and selection.display is None
        assert selection.env["DISPLAY"] == f"{server.name}.0"


def test_gpus_spread_over_screens(xvfb):
    screens = []
    for s in range(3):
        screens += ["-screen", str(s), "320x240x24"]
    server = xvfb(*screens, *GLX)
    request = PlatformRequest(system="Linux", width=320, height=240, x_display=server.name, gpus=(2, 0),
                              env={"PATH": "/nonexistent"})  # no nvidia-smi: gpus are screen numbers
    with select(request) as selection:
        displays = [selection.for_instance(i)[0]["DISPLAY"] for i in range(4)]
        assert displays == [f"{server.name}.2", f"{server.name}.0", f"{server.name}.2", f"{server.name}.0"]
    report = linux64(PlatformRequest(system="Linux", width=320, height=240, x_display=server.name, gpus=(5,),
                                     env={"PATH": "/nonexistent"}))
    assert "screen 5 does not exist" in report.reasons[0]


def test_headless_needs_no_display():
    with select(PlatformRequest(platform="Linux64", system="Linux", x_display=":4093", headless=True)) as selection:
        assert selection.args == ["-batchmode", "-nographics"] and selection.headless
        assert "DISPLAY" not in selection.env


def test_fixes_quote_an_xvfb_command_that_runs_for_any_form_of_the_name(xvfb):
    # Xvfb takes only ":N" ("Unrecognized option: unix:N"): a fix for "unix:N" or "host:N" must not quote the
    # name as given. A display on a host is reached over TCP, which Xvfb does not listen on by default.
    server = xvfb("-screen", "0", "640x480x24", *GLX)
    number = server.name.lstrip(":")
    report = linux64(PlatformRequest(system="Linux", x_display=f"unix:{number}.2"))
    (reason,) = report.reasons
    assert f"screen 2 does not exist on X display unix:{number}" in reason, reason
    assert f"(Xvfb :{number} -screen 0 ... -screen 2 300x300x24)" in reason, reason
    report = linux64(PlatformRequest(system="Linux", x_display="127.0.0.1:4093"))
    (reason,) = report.reasons
    assert "X display 127.0.0.1:4093 is not reachable" in reason, reason
    assert "Xvfb :4093 -listen tcp -screen 0 300x300x24 +extension GLX &" in reason and "on 127.0.0.1" in reason, reason
    report = linux64(PlatformRequest(system="Linux", x_display=":4093"))
    assert "(Xvfb :4093 -screen 0 300x300x24 +extension GLX &)" in report.reasons[0], report.reasons


def test_the_fix_for_an_unreachable_display_starts_the_screen_asked_for():
    # Following the fix must give a server with the screen that was named, not only screen 0.
    report = linux64(PlatformRequest(system="Linux", x_display=":4093.1"))
    (reason,) = report.reasons
    assert "X display :4093 is not reachable" in reason, reason
    assert "(Xvfb :4093 -screen 0 300x300x24 -screen 1 300x300x24 +extension GLX &)" in reason, reason


@pytest.mark.parametrize("form", ["{n}", "{n}.0"])
def test_a_display_number_without_a_colon_is_taken_as_ai2thor_takes_it(xvfb, form):
    # AI2-THOR's Controller(x_display="0.0") means ":0.0" (it prepends the colon); so does renderd.
    server = xvfb("-screen", "0", "640x480x24", *GLX)
    name = form.format(n=server.name.lstrip(":"))
    with select(PlatformRequest(system="Linux", x_display=name)) as selection:
        assert selection.name == "Linux64"
        assert selection.env["DISPLAY"] == f"{server.name}.0"
