"""The reference player's gl renderer: the same picture as the numpy renderer, through GLX on a real
Xvfb and through EGL; and a player that cannot get its context fails as Unity does."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("moderngl")

HERE = os.path.dirname(os.path.abspath(__file__))
#: At least this share of pixels must agree (rasterisation may differ along edges).
MIN_AGREEMENT = 0.97
CHILD_TIMEOUT = 60


def compare(env: dict[str, str], width: int = 160, height: int = 120) -> dict:
    full_env = dict(os.environ, **env)
    root = os.path.dirname(os.path.dirname(HERE))
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (root, full_env.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, os.path.join(HERE, "gl_compare.py"), str(width), str(height)],
        capture_output=True, text=True, env=full_env, timeout=CHILD_TIMEOUT,
    )
    if done.returncode != 0 and "GLUnavailable" in done.stderr and "EGL" in done.stderr:
        pytest.skip(f"no EGL driver here: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def assert_same_picture(result: dict) -> None:
    assert result["rgb"] >= MIN_AGREEMENT, result
    assert result["ids"] >= MIN_AGREEMENT, result
    assert result["depth"] >= MIN_AGREEMENT, result


def test_egl_matches_numpy():
    result = compare({"RENDERD_PLATFORM": "CloudRendering", "DISPLAY": ""})
    assert result["where"].startswith("EGL")
    assert_same_picture(result)


@pytest.mark.xvfb
def test_glx_on_xvfb_matches_numpy(xvfb):
    server = xvfb("-screen", "0", "320x240x24", "+extension", "GLX")
    result = compare({"RENDERD_PLATFORM": "Linux64", "DISPLAY": f"{server.name}.0"})
    assert result["where"] == f"GLX on DISPLAY={server.name}.0"
    assert result["vendor"] == "Mesa/X.org"  # the GLX vendor string: the context came from the X server
    assert_same_picture(result)


@pytest.mark.xvfb
def test_glx_needs_the_extension(xvfb, tmp_path):
    server = xvfb("-screen", "0", "320x240x24", "-extension", "GLX")
    code, log = run_player(tmp_path, {"RENDERD_PLATFORM": "Linux64", "DISPLAY": f"{server.name}.0"})
    assert code != 0
    assert f"cannot create an OpenGL 3.3 context through GLX on DISPLAY={server.name}.0" in log


def test_player_without_a_display_fails_with_the_reason(tmp_path):
    code, log = run_player(tmp_path, {"RENDERD_PLATFORM": "Linux64", "DISPLAY": ""})
    assert code != 0
    assert "renders through GLX on an X display, but DISPLAY is not set" in log


def test_unreachable_display_is_named(tmp_path):
    from renderd.player.gl import GLRenderer, GLUnavailable

    saved = os.environ.get("DISPLAY")
    os.environ["DISPLAY"] = ":4093"
    try:
        with pytest.raises(GLUnavailable, match="through GLX on DISPLAY=:4093"):
            GLRenderer(platform="Linux64")
    finally:
        if saved is None:
            del os.environ["DISPLAY"]
        else:
            os.environ["DISPLAY"] = saved


def run_player(tmp_path, env: dict[str, str]) -> tuple[int, str]:
    """Start renderd-player --renderer gl (its pipes are never opened: the renderer fails first)."""
    log_path = tmp_path / "player.log"
    full_env = dict(os.environ, **env)
    full_env.update({
        "AI2THOR_SERVER_TYPE": "FIFO",
        "AI2THOR_FIFO_SERVER_PIPE_PATH": str(tmp_path / "server.pipe"),
        "AI2THOR_FIFO_CLIENT_PIPE_PATH": str(tmp_path / "client.pipe"),
    })
    done = subprocess.run(
        [sys.executable, "-m", "renderd.player", "--renderer", "gl", "-logFile", str(log_path)],
        capture_output=True, text=True, env=full_env, timeout=CHILD_TIMEOUT,
    )
    return done.returncode, log_path.read_text(encoding="utf-8") if log_path.exists() else done.stderr
