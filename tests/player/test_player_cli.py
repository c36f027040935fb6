"""The player's command line, environment, log file and output modes, as real processes."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from renderd.player.__main__ import build_parser
from renderd.protocol import FieldType, decode_metadata

SMALL = ["-screen-width", "48", "-screen-height", "32"]
PROMPT = 10.0


def run_player(args, *, env_extra=None, timeout=PROMPT, command=None):
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("AI2THOR_", "RENDERD_"))}
    env.update(env_extra or {})
    argv = command or [sys.executable, "-m", "renderd.player", *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)


def test_help_lists_every_flag():
    result = run_player(["--help"])
    assert result.returncode == 0
    flags = [s for action in build_parser()._actions for s in action.option_strings]
    required = [
        "-screen-fullscreen", "-screen-quality", "-screen-width", "-screen-height", "-batchmode", "-nographics",
        "-force-device-index", "-logFile", "--static-frame", "--renderer", "--metadata-objects",
        "--fault-at-start", "--start-delay", "--log-level", "--help",
    ]
    for flag in set(flags) | set(required):
        assert flag in result.stdout, f"{flag} missing from --help"
    for env in ("AI2THOR_SERVER_TYPE", "AI2THOR_FIFO_SERVER_PIPE_PATH", "AI2THOR_FIFO_CLIENT_PIPE_PATH",
                "AI2THOR_CLIENT_TOKEN", "AI2THOR_SERVER_SIDE_SCREENSHOT", "RENDERD_PLATFORM"):
        assert env in result.stdout
    for kind in ("abort", "segfault", "exit", "hang", "sleep", "garbage", "oversize", "truncate", "close"):
        assert kind in result.stdout


def test_fifo_without_pipe_paths_is_a_usage_error():
    result = run_player(SMALL, env_extra={"AI2THOR_SERVER_TYPE": "FIFO"})
    assert result.returncode == 2
    assert "AI2THOR_FIFO_SERVER_PIPE_PATH" in result.stderr


def test_wsgi_without_http_link_fails_clearly():
    code = (
        "import sys; sys.modules['renderd.player.http_link'] = None\n"
        "from renderd.player.__main__ import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    result = run_player(
        [], command=[sys.executable, "-c", code, *SMALL],
        env_extra={"AI2THOR_SERVER_TYPE": "WSGI", "AI2THOR_HOST": "127.0.0.1", "AI2THOR_PORT": "1"},
    )
    assert result.returncode == 2
    assert "renderd.player.http_link" in result.stderr


@pytest.mark.parametrize("args", [["-screen-width", "0"], ["-screen-height", "5000"], ["--metadata-objects", "-1"],
                                  ["--metadata-objects", "100000000"]])
def test_bad_values_are_usage_errors(args):
    # (10^8 synthetic objects would be built for many minutes, or until memory runs out, before the pipes
    # are even opened: the most that fits a message is refused at once instead.)
    result = run_player(args, env_extra={"AI2THOR_FIFO_SERVER_PIPE_PATH": "/nonexistent/s",
                                         "AI2THOR_FIFO_CLIENT_PIPE_PATH": "/nonexistent/c"})
    assert result.returncode == 2


@pytest.mark.parametrize("port", ["70000", "0", "-1", "http", ""])
def test_a_bad_http_port_is_a_usage_error_at_once(port):
    result = run_player(SMALL, env_extra={"AI2THOR_SERVER_TYPE": "WSGI", "AI2THOR_HOST": "127.0.0.1",
                                          "AI2THOR_PORT": port})
    assert result.returncode == 2 and "AI2THOR_PORT" in result.stderr and "1-65535" in result.stderr


def test_bad_fault_env_is_a_usage_error():
    result = run_player(SMALL, env_extra={"RENDERD_PLAYER_FAULT_AT_START": "explode"})
    assert result.returncode == 2 and "RENDERD_PLAYER_FAULT_AT_START" in result.stderr


def test_log_file_content_and_unknown_unity_args(spawn):
    p = spawn([*SMALL, "-batchmode", "-screen-quality", "5", "-force-device-index", "1", "-someUnityFlag",
               "-anotherOne", "7", "--log-level", "debug"])
    p.start_session()
    assert p.step("MoveAhead")
    assert p.terminate() == 0
    log = p.log_text()
    assert "starting: pid" in log and "-screen-quality 5" in log
    assert "ignoring unknown arguments (as Unity does): -someUnityFlag -anotherOne 7" in log
    assert "device index 1" in log and "48 x 32" in log and "client token set" in log
    assert "test-token" not in log  # the token's value is never logged
    assert "first message sent" in log
    assert "action MoveAhead seq=1 -> ok" in log  # debug level logs each action
    assert "received SIGTERM" in log
    assert p.stderr_text() == ""


def test_unknown_args_that_begin_like_the_players_own_are_ignored_too(spawn):
    """Unity ignores every argument it does not know; so does the player, also one that begins with -h or
    is the start of one of its own flags (argparse would read -headless as -h, -n as -nographics, -log as
    -logFile taking the next argument, -screen as an ambiguous flag)."""
    unknown = ["-headless", "-hideWindow", "-b", "-n", "-screen", "-force", "-log", "-nographic"]
    p = spawn([*unknown, *SMALL])
    first = p.start_session()
    assert first.frame is not None and first.frame.shape == (32, 48, 3)  # not -nographics
    assert p.step("MoveAhead")
    assert p.terminate() == 0
    log = p.log_text()
    assert f"ignoring unknown arguments (as Unity does): {' '.join(unknown)}" in log
    assert "batchmode False, nographics False" in log and "48 x 32" in log


def test_actions_not_logged_at_info(spawn):
    p = spawn(SMALL)
    p.start_session()
    assert p.step("MoveAhead")
    assert p.terminate() == 0
    assert "action MoveAhead" not in p.log_text()


def test_log_file_dash_means_stdout(spawn):
    p = spawn([*SMALL, "-logFile", "-"], log_file=False)
    p.start_session()
    assert p.terminate() == 0
    out = p.stdout_text()
    assert "first message sent" in out and "received SIGTERM" in out


def test_without_log_file_logs_go_to_stderr(spawn):
    p = spawn(SMALL, log_file=False)
    p.start_session()
    assert p.terminate() == 0
    assert "first message sent" in p.stderr_text()


def test_cloudrendering_sends_rgba(spawn):
    p = spawn(SMALL, platform="CloudRendering")
    first = p.recv_message()
    rgb = first.first(FieldType.RGB_IMAGE)
    assert len(rgb) == 48 * 32 * 4
    assert (np.frombuffer(rgb, dtype=np.uint8).reshape(32, 48, 4)[..., 3] == 255).all()
    ev = p.assembler.event(first)
    assert ev.frame.shape == (32, 48, 3)
    p.open_client()
    ref = spawn(SMALL, platform="Linux64")
    assert np.array_equal(ref.start_session().frame, ev.frame)  # the same picture, one more byte per pixel


def test_nographics_sends_metadata_only(spawn):
    p = spawn([*SMALL, "-batchmode", "-nographics"])
    first = p.recv_message()
    assert [t for t, _ in first.fields] == [FieldType.METADATA]
    assert decode_metadata(first.first(FieldType.METADATA))["agents"][0]["screenWidth"] == 48
    p.open_client()
    p.step("Initialize", renderDepthImage=True, renderInstanceSegmentation=True)
    p.send("MoveAhead")
    message = p.recv_message()
    assert [t for t, _ in message.fields] == [FieldType.METADATA]


def test_static_frame_does_not_follow_the_agent(spawn):
    p = spawn([*SMALL, "--static-frame"])
    first = p.start_session()
    frame = first.frame.copy()
    ev = p.step("RotateRight")
    assert ev.metadata["agent"]["rotation"]["y"] == 90
    assert np.array_equal(ev.frame, frame)
    ev = p.step("ChangeResolution", x=20, y=10)
    assert ev.frame.shape == (10, 20, 3)


def test_metadata_objects_flag(spawn):
    p = spawn([*SMALL, "--metadata-objects", "130"])
    first = p.recv_message()
    body = first.first(FieldType.METADATA)
    assert 100_000 < len(body) < 160_000
    objects = decode_metadata(body)["agents"][0]["objects"]
    assert sum(o["objectType"] == "Synthetic" for o in objects) == 130


def test_unhandled_error_goes_to_the_log(tmp_path):
    log = tmp_path / "crash.log"
    code = (
        "import sys\n"
        "from renderd.player import renderer\n"
        "def broken(self, state): raise RuntimeError('renderer exploded')\n"
        "renderer.NumpyRenderer.render = broken\n"
        "from renderd.player.__main__ import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    import os

    os.mkfifo(tmp_path / "s")
    os.mkfifo(tmp_path / "c")
    reader = os.open(tmp_path / "s", os.O_RDONLY | os.O_NONBLOCK)  # lets the player open server.pipe
    try:
        result = run_player(
            [], command=[sys.executable, "-c", code, *SMALL, "-logFile", str(log)],
            env_extra={"AI2THOR_FIFO_SERVER_PIPE_PATH": str(tmp_path / "s"),
                       "AI2THOR_FIFO_CLIENT_PIPE_PATH": str(tmp_path / "c")},
        )
    finally:
        os.close(reader)
    assert result.returncode == 3
    text = log.read_text()
    assert "player crashed with an unhandled error" in text and "renderer exploded" in text


def test_gl_renderer_unavailable_is_a_usage_error(tmp_path):
    code = (
        "import sys; sys.modules['renderd.player.gl'] = None\n"
        "from renderd.player.__main__ import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    result = run_player([], command=[sys.executable, "-c", code, *SMALL, "--renderer", "gl"],
                        env_extra={"AI2THOR_FIFO_SERVER_PIPE_PATH": str(tmp_path / "s"),
                                   "AI2THOR_FIFO_CLIENT_PIPE_PATH": str(tmp_path / "c")})
    assert result.returncode == 2 and "cannot start the gl renderer" in result.stderr


# The player program runs inside the renderd package, so `import renderd` runs first: if it imported
# numpy (a few hundred milliseconds), a SIGTERM/SIGINT in that time would kill the player with the
# default disposition (-15, or a KeyboardInterrupt traceback) instead of a clean exit 0.
_SIGNALS_BEFORE_NUMPY = r"""
import importlib.abc, runpy, signal, sys

seen = []

class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "numpy" and not seen:
            seen.append(signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
                        and signal.getsignal(signal.SIGINT) is not signal.default_int_handler)
        return None

sys.meta_path.insert(0, Watch())
sys.argv = ["renderd-player", "--help"]
try:
    runpy.run_module("renderd.player", run_name="__main__", alter_sys=True)
except SystemExit:
    pass
print("numpy first imported with the handlers installed:", seen)
"""


def test_signal_handlers_are_installed_before_numpy_is_imported():
    result = run_player([], command=[sys.executable, "-c", _SIGNALS_BEFORE_NUMPY])
    assert "numpy first imported with the handlers installed: [True]" in result.stdout, result.stderr


def test_importing_renderd_is_cheap_and_its_names_still_work():
    code = ("import sys, renderd; assert 'numpy' not in sys.modules, 'import renderd loaded numpy'; "
            "from renderd import Event, launch; assert renderd.Event is Event and callable(launch); print('ok')")
    result = run_player([], command=[sys.executable, "-c", code])
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
