"""Review 9 of the reference player: each test drives a real player process over real FIFOs."""

from __future__ import annotations

import time
from collections import OrderedDict

import numpy as np
import pytest

FAST = ["-screen-width", "16", "-screen-height", "16"]
#: Deadline for a prompt answer or exit (seconds).
PROMPT = 10.0


def ready(spawn, *args, **kwargs):
    p = spawn([*FAST, *args], **kwargs)
    p.start_session()
    return p


def test_render_switches_are_read_as_a_unity_build_reads_them(spawn):
    # A Unity build converts renderImage (and the other switches) to bool as Json.NET does: 0 and "false"
    # are false. The player sent the RGB image for renderImage 0 or "false", and depth for
    # renderDepthImage "false".
    p = ready(spawn)
    for off in (0, 0.0, "false", "False"):
        ev = p.step("Pass", renderImage=off)
        assert ev and ev.frame is None, f"renderImage={off!r} sent an image"
    for on in (1, "true", True, None):
        assert p.step("Pass", renderImage=on).frame is not None, f"renderImage={on!r} sent no image"
    ev = p.step("Pass", renderDepthImage="false", renderInstanceSegmentation="false")
    assert ev.frame is not None and ev.depth_frame is None and ev.instance_segmentation_frame is None
    ev = p.step("Pass", renderDepthImage=1, renderInstanceSegmentation="TRUE")
    assert ev.depth_frame is not None and ev.instance_segmentation_frame is not None
    assert p.step("Initialize", renderDepthImage="false", renderInstanceSegmentation=0)
    ev = p.step("Pass")
    assert ev.depth_frame is None and ev.instance_segmentation_frame is None
    assert p.step("Initialize", renderDepthImage="true")
    ev = p.step("Pass", renderDepthImage=None)  # null: not given, the Initialize setting holds
    assert ev.depth_frame is not None


def test_reachable_positions_on_a_fine_grid_come_promptly(spawn):
    # Initialize takes gridSize down to 0.01 m: GetReachablePositions then lists about 230,000 points
    # (8 MB of metadata), each checked against the walls and boxes one at a time in Python: 10-15 s for
    # one answer. The points are now checked a whole grid row at a time: well under a second.
    from renderd.player.scene import SCENES

    p = ready(spawn)
    assert p.step("Initialize", gridSize=0.01)
    started = time.monotonic()
    ev = p.step("GetReachablePositions", timeout=PROMPT)
    took = time.monotonic() - started
    positions = ev.metadata["actionReturn"]
    assert ev and len(positions) > 200_000
    assert took < 5.0, f"GetReachablePositions at gridSize 0.01 took {took:.1f} s"
    scene = SCENES["FloorPlan1"]
    assert {"x": 0.0, "y": 0.9, "z": -2.0} in positions and positions == sorted(
        positions, key=lambda q: (q["x"], q["z"]))
    assert all(scene.collision(q["x"], q["z"]) is None for q in positions[::997])
    assert scene.collision(0.0, 1.0) is not None and {"x": 0.0, "y": 0.9, "z": 1.0} not in positions


def test_a_third_party_camera_without_a_field_of_view_has_unitys_default(spawn):
    # A Unity build gives a new third-party camera 90 degrees (DEFAULT_FOV) when no fieldOfView is
    # passed, whatever the agent's own field of view; the player gave it the agent's (Initialize's).
    p = ready(spawn)
    assert p.step("Initialize", fieldOfView=60)
    here = p.step("Pass").metadata
    pose = {"position": here["cameraPosition"],
            "rotation": {"x": here["agent"]["cameraHorizon"], "y": here["agent"]["rotation"]["y"], "z": 0}}
    ev = p.step("AddThirdPartyCamera", **pose)
    assert ev and ev.metadata["thirdPartyCameras"][0]["fieldOfView"] == 90
    seen = ev.third_party_camera_frames[0].copy()
    assert p.step("Initialize", fieldOfView=90)
    assert (p.step("Pass").frame == seen).all()  # rendered at 90 degrees, from the agent's own pose


#: Runs the player with one step of its exit made slow, after writing a flag file: the window in which a
#: SIGTERM must not change the exit code the player has decided, held open until the test says (in
#: FLAG.sent) that it has sent the signal (at most 10 s). argv: flag, what to slow, player args.
_SLOW_STEP = (
    "import logging, os, sys, time\n"
    "flag, what = sys.argv[1], sys.argv[2]\n"
    "def slow():\n"
    "    open(flag, 'w').close()\n"
    "    deadline = time.monotonic() + 10\n"
    "    while not os.path.exists(flag + '.sent') and time.monotonic() < deadline:\n"
    "        time.sleep(0.01)\n"
    "if what == 'close':\n"
    "    from renderd.player.fifo_link import FifoLink\n"
    "    close = FifoLink.close\n"
    "    def slow_close(self):\n"
    "        slow()\n"
    "        close(self)\n"
    "    FifoLink.close = slow_close\n"
    "else:\n"
    "    from renderd.player import renderer\n"
    "    def broken(self, state): raise RuntimeError('renderer exploded')\n"
    "    renderer.NumpyRenderer.render = broken\n"
    "    format_exception = logging.Formatter.formatException\n"
    "    def slow_format(self, ei):\n"
    "        slow()\n"
    "        return format_exception(self, ei)\n"
    "    logging.Formatter.formatException = slow_format\n"
    "from renderd.player.__main__ import main\n"
    "sys.exit(main(sys.argv[3:]))\n"
)


def _spawn_slow(spawn, tmp_path, what):
    import sys

    from tests.helpers.fifo_driver import player_command

    flag, log = tmp_path / f"{what}.flag", tmp_path / f"{what}.log"
    command = [sys.executable, "-c", _SLOW_STEP, str(flag), what,
               *player_command([*FAST, "-logFile", str(log)])[3:]]
    return spawn(command=command), flag, log


def _sigterm_once_flagged(p, flag):
    import signal

    deadline = time.monotonic() + PROMPT
    while not flag.exists():
        assert time.monotonic() < deadline and p.alive(), f"never reached the slow step: {p.log_text()}"
        time.sleep(0.01)
    p.proc.send_signal(signal.SIGTERM)
    open(f"{flag}.sent", "w").close()  # (the signal is pending before the slow step can see this)


def test_sigterm_after_a_protocol_error_leaves_exit_code_4(spawn, tmp_path):
    # The player had decided to exit 4 (bad framing from the client) but a SIGTERM arriving while it closed
    # its pipes (a client that gives up on it and signals it) unwound the exit as a SIGTERM: exit 0, as if
    # nothing had been wrong.
    p, flag, log = _spawn_slow(spawn, tmp_path, "close")
    p.start_session()
    p.send_raw_buffers([b"\x2a\x00\x00\x00\x01x"])  # a field of unknown type 42
    _sigterm_once_flagged(p, flag)
    assert p.wait(PROMPT) == 4, log.read_text()
    assert "malformed message from the client" in log.read_text()


def test_sigterm_while_a_crash_is_logged_leaves_exit_code_3_and_the_traceback(spawn, tmp_path):
    # An unhandled error (the renderer failed) is logged with its traceback and ends the player with exit 3;
    # a SIGTERM arriving while the traceback was being written made it exit 0 with no traceback in the log.
    import os

    p, flag, log = _spawn_slow(spawn, tmp_path, "crash")
    reader = os.open(p.server_path, os.O_RDONLY | os.O_NONBLOCK)  # lets the player open server.pipe
    try:
        _sigterm_once_flagged(p, flag)
        assert p.wait(PROMPT) == 3, log.read_text()
    finally:
        os.close(reader)
    text = log.read_text()
    assert "player crashed with an unhandled error" in text and "renderer exploded" in text


def test_a_gl_player_whose_x_server_died_still_exits_with_its_own_code(spawn):
    # Under GLX, a player whose X server had died since its last frame released its GL context on the way
    # out; Xlib met the dead connection and ended the process in its I/O error handler (exit 1, "XIO: fatal
    # IO error" on stderr, the log's last lines missing): a client closing client.pipe (exit 0) or a
    # SIGTERM (exit 0) looked like a failure. The loss is now noticed on the way out too, and nothing of
    # the dead connection is touched.
    import signal

    pytest.importorskip("moderngl")
    pytest.importorskip("Xlib")
    from tests.helpers.xvfb_review14e import _Xvfb

    server = _Xvfb()
    try:
        args = ["-screen-width", "32", "-screen-height", "24", "--renderer", "gl"]
        players = [spawn(args, platform="Linux64", env={"DISPLAY": server.name}) for _ in range(2)]
        for p in players:
            p.start_session()
            assert p.step("MoveBack")
    finally:
        server.kill()
    by_eof, by_sigterm = players
    by_eof.close_client_pipe()
    by_sigterm.proc.send_signal(signal.SIGTERM)
    assert by_eof.wait(PROMPT) == 0, by_eof.stderr_text()
    assert "the client closed client.pipe" in by_eof.log_text()
    assert by_sigterm.wait(PROMPT) == 0, by_sigterm.stderr_text()
    assert "received SIGTERM; exiting" in by_sigterm.log_text()
    for p in players:
        assert "XIO" not in p.stderr_text()


def test_nographics_needs_no_graphics_even_with_the_gl_renderer(spawn):
    # Unity's -nographics does not initialise a graphics device at all, so a build runs so on a machine with
    # no GPU and no display (renderd's headless platform). The player still started the gl renderer it then
    # never used: with no context to be had it exited 2, "cannot start the gl renderer".
    p = spawn([*FAST, "-nographics", "--renderer", "gl"], platform="Linux64", env={"DISPLAY": ""})
    try:
        first = p.start_session(timeout=PROMPT)
    except Exception:
        pytest.fail(f"the player did not start ({p.wait(PROMPT)}): {p.stderr_text()[-500:]}")
    assert first.frame is None
    ev = p.step("MoveAhead")
    assert ev and ev.frame is None and ev.metadata["agent"]["position"]["z"] == pytest.approx(-1.75)
    assert "-nographics" in p.log_text() and "gl renderer is not started" in p.log_text()


def test_initialize_returns_the_camera_planes_as_a_build_does(spawn):
    # A build answers Initialize with its InitializeReturn, the camera's near and far planes, which
    # AI2-THOR's controller takes for its depth conversions; the player returned null, as builds too old
    # to send it do.
    p = ready(spawn)
    ev = p.step("Initialize", gridSize=0.25, renderDepthImage=True)
    assert ev and ev.metadata["actionReturn"] == {"cameraNearPlane": 0.1, "cameraFarPlane": 20.0}
    assert ev.metadata["cameraNearPlane"] == 0.1 and ev.metadata["cameraFarPlane"] == 20.0
    failed = p.step("Initialize", fieldOfView=500)  # a field of view a build refuses
    assert not failed and failed.metadata["actionReturn"] is None


def test_the_frame_caches_are_bounded_in_bytes_as_well_as_in_count(monkeypatch):
    # A frame at 4096 x 4096 is 176 MiB (RGB, float32 depth, RGBA ids): eight cached frames, four wire frames
    # and four ray tables would hold over 2 GiB. Each cache now also keeps within a byte budget, the most
    # recent entry always kept (so an unchanged view still costs nothing).
    import renderd.player.core as core
    import renderd.player.renderer as renderer
    from renderd.player.renderer import NumpyRenderer, RenderState, trim_cache
    from renderd.player.scene import AGENT_Y, CAMERA_HEIGHT, SCENES

    one = 64 * 48 * (3 + 4 + 4)  # bytes of one 64 x 48 frame
    monkeypatch.setattr(renderer, "FRAME_CACHE_BYTES", 2 * one)
    r = NumpyRenderer()
    states = [RenderState(SCENES["FloorPlan1"], 64, 48, (0.0, AGENT_Y + CAMERA_HEIGHT, -2.0), yaw, 0.0)
              for yaw in (0.0, 90.0, 180.0)]
    frames = [r.render(s) for s in states]
    assert list(r._frames) == states[1:]  # (the count limit, 8, would have kept all three)
    assert r.render(states[2]) is frames[2]
    monkeypatch.setattr(renderer, "FRAME_CACHE_BYTES", one // 2)
    r.render(states[0])
    assert list(r._frames) == [states[0]]  # the latest stays, even over the budget

    monkeypatch.setattr(core, "WIRE_CACHE_BYTES", 1)
    p = core.Player(width=64, height=48)
    for action in ("RotateRight", "RotateRight", "Pass"):
        p.answer({"action": action})
    assert len(p._wire_cache) == 1

    cache = OrderedDict((k, (np.zeros(k, np.uint8),)) for k in (10, 20, 30))
    trim_cache(cache, 8, 50)
    assert list(cache) == [20, 30]
