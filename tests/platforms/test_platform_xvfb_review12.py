"""Managed displays are shared only between environments that start the same Xvfb: the variables that
change the server (its binary, its GL drivers, its libraries) key the sharing, the rest does not."""

from __future__ import annotations

import os

import pytest

from renderd.platforms import PlatformRequest, select
from renderd.platforms.xvfb import DisplayManager

pytestmark = [pytest.mark.xvfb, pytest.mark.usefixtures("no_xvfb_left")]


@pytest.fixture
def manager(xvfb):  # the xvfb fixture skips when Xvfb is missing
    m = DisplayManager()
    yield m
    m.shutdown()


def _server_env(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        pairs = [item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item]
    return {k.decode(): v.decode() for k, v in pairs}


def test_a_different_gl_environment_gets_its_own_server(manager):
    base = {k: v for k, v in os.environ.items() if k not in ("LP_NUM_THREADS", "LIBGL_ALWAYS_SOFTWARE")}
    one = manager.acquire(97, 61, env={**base, "LP_NUM_THREADS": "1"})
    two = manager.acquire(97, 61, env={**base, "LP_NUM_THREADS": "2"})
    soft = manager.acquire(97, 61, env={**base, "LP_NUM_THREADS": "1", "LIBGL_ALWAYS_SOFTWARE": "1"})
    same = manager.acquire(97, 61, env={**base, "LP_NUM_THREADS": "1", "RENDERD_UNRELATED_SETTING": "x"})
    try:
        assert len({one.pid, two.pid, soft.pid}) == 3 and len({one.name, two.name, soft.name}) == 3
        assert _server_env(one.pid)["LP_NUM_THREADS"] == "1" and _server_env(two.pid)["LP_NUM_THREADS"] == "2"
        assert _server_env(soft.pid)["LIBGL_ALWAYS_SOFTWARE"] == "1"
        assert same.pid == one.pid  # a variable Xvfb does not read does not split the sharing
        assert len(manager.displays()) == 3
        one.release()
        assert same.alive()  # still shared: released only once both handles are
        same.release()
        assert not one.alive() and two.alive() and soft.alive()
    finally:
        for display in (one, two, soft, same):
            display.release()
    assert not two.alive() and not soft.alive() and manager.displays() == []


def test_selections_with_different_gl_environments_do_not_share(xvfb):
    plain = PlatformRequest(platform="Linux64", system="Linux", width=93, height=57, x_display="managed",
                            env={"MESA_GL_VERSION_OVERRIDE": "3.3"})
    other = PlatformRequest(platform="Linux64", system="Linux", width=93, height=57, x_display="managed",
                            env={"MESA_GL_VERSION_OVERRIDE": "4.5"})
    with select(plain) as first, select(other) as second, select(plain) as third:
        assert first.display.pid != second.display.pid
        assert third.display.pid == first.display.pid
        assert _server_env(second.display.pid)["MESA_GL_VERSION_OVERRIDE"] == "4.5"
        pids = (first.display.pid, second.display.pid)
    assert not any(os.path.exists(f"/proc/{pid}") and _alive(pid) for pid in pids)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
