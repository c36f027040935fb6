"""X display names in every form python-xlib (the probe) and X clients (libxcb: Unity's player, xdpyinfo) take:
``host:N``, ``tcp/host:N``, ``inet/``/``inet6/`` (libxcb's), IPv6 hosts bracketed or not; anything else is refused
with an error that says what is wrong. Checked against a real Xvfb listening on TCP on this machine's loopback."""

from __future__ import annotations

import shutil
import socket
import subprocess

import pytest
from click.testing import CliRunner

from renderd.platforms import PlatformRequest, check, select, x11
from renderd.platforms.doctor import doctor_command

#: Deadline for xdpyinfo to answer.
CLIENT_DEADLINE = 20.0


@pytest.mark.parametrize(
    ("name", "protocol", "host", "number", "screen"),
    [
        (":1", None, "", 1, None),
        ("1.0", None, "", 1, 0),
        ("unix:2", None, "unix", 2, None),
        ("unix/:2.1", "unix", "", 2, 1),
        ("localhost:10.0", None, "localhost", 10, 0),
        ("tcp/host-1.example:0", "tcp", "host-1.example", 0, None),
        ("inet/127.0.0.1:3", "inet", "127.0.0.1", 3, None),
        ("[::1]:0", None, "[::1]", 0, None),
        ("::1:0.1", None, "::1", 0, 1),
        ("inet6/[fe80::1]:4", "inet6", "[fe80::1]", 4, None),
    ],
)
def test_every_form_x_clients_take_is_a_display_name(name, protocol, host, number, screen):
    parsed = x11.parse_display_name(name)
    assert parsed == x11.DisplayName(host, number, screen, protocol), parsed
    assert x11.display_name_problem(name) is None
    if screen is not None:
        assert str(parsed) == (name if ":" in name else ":" + name)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("tcp/:0", "protocol 'tcp' needs a host"),
        ("ftp/host:0", "'ftp' before the '/' is not a protocol"),
        ("host::0", "the host 'host:' is not an IPv6 address"),  # (DECnet, which X clients no longer take)
        ("[::1:0", "the host '[::1' is not an IPv6 address"),
        ("[zz::1]:0", "the host '[zz::1]' is not an IPv6 address"),
        ("a b:0", "the host 'a b' is not a host name or IP address"),
        ("host:x", "it does not end with ':NUMBER' or ':NUMBER.SCREEN'"),
    ],
)
def test_other_names_are_refused_saying_what_is_wrong(name, why):
    assert x11.parse_display_name(name) is None
    problem = x11.display_name_problem(name)
    assert problem.startswith(f"{name!r} is not an X display name: {why}"), problem
    assert "; expected [PROTOCOL/]HOST:NUMBER[.SCREEN], such as" in problem
    report = check(PlatformRequest(platform="Linux64", system="Linux", x_display=name))[0]
    assert not report.valid and report.reasons[0].startswith(problem), report.reasons
    result = CliRunner().invoke(doctor_command, ["--platform", "Linux64", "--x-display", name])
    assert result.exit_code == 2 and why in result.output, result.output


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


def test_a_display_on_tcp_is_reached_in_every_form(xvfb):
    server = xvfb("-listen", "tcp", "-screen", "0", "320x240x24", "+extension", "GLX")
    n = server.number
    with socket.create_connection(("127.0.0.1", 6000 + n), timeout=CLIENT_DEADLINE):
        pass  # (it listens on TCP)
    names = [f"localhost:{n}", f"tcp/localhost:{n}", f"inet/127.0.0.1:{n}", f"unix/:{n}"]
    if _ipv6_loopback():
        names += [f"[::1]:{n}", f"::1:{n}", f"tcp/::1:{n}", f"inet6/[::1]:{n}"]
    facts = x11.probe_displays(names, {})
    assert all(f.ok and f.glx for f in facts.values()), facts
    xdpyinfo = shutil.which("xdpyinfo")
    for name in names:
        request = PlatformRequest(platform="Linux64", system="Linux", width=64, height=64, x_display=name)
        with select(request) as selection:  # (raises PlatformError with the reasons when not valid)
            display = selection.env["DISPLAY"]
        assert display == f"{name}.0", display
        if xdpyinfo is not None:  # an X client (libX11/libxcb, as Unity's player) takes the name the player gets
            done = subprocess.run([xdpyinfo, "-display", display], capture_output=True, timeout=CLIENT_DEADLINE)
            assert done.returncode == 0, (display, done.stderr)
    for name in (names[1], names[-1]):  # renderd doctor takes them too
        result = CliRunner().invoke(doctor_command, ["--platform", "Linux64", "--x-display", name, "--width", "64",
                                                     "--height", "64"])
        assert result.exit_code == 0, result.output
    # Nothing listens there: the reason names the display as given.
    gone = f"[::1]:{n + 1000}" if _ipv6_loopback() else f"tcp/localhost:{n + 1000}"
    report = check(PlatformRequest(platform="Linux64", system="Linux", x_display=gone))[0]
    assert not report.valid and f'display "{gone}"' in report.reasons[0], report.reasons
