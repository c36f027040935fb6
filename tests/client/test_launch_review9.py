"""launch(), review 9: arguments of the wrong kind are ConfigErrors naming them, before anything starts. Real
processes, real FIFOs; nothing may be left behind (``no_leaks``)."""

from __future__ import annotations

import os

import psutil
import pytest

import renderd
from renderd.errors import ConfigError

from .conftest import START, blocked_in_poll, peer_argv, wait_for

pytestmark = pytest.mark.usefixtures("no_leaks")


@pytest.mark.parametrize(
    ("kwargs", "key", "says"),
    [
        (dict(env=["RENDERD_TEST=1"]), "env", "list"),  # was: AttributeError 'list' object has no attribute 'items'
        (dict(env="RENDERD_TEST=1"), "env", "str"),
        (dict(pipe_size="1M"), "pipe_size", "'1M'"),  # was: TypeError '<' not supported between 'int' and 'str'
        (dict(pipe_size=-1), "pipe_size", "-1"),  # was: taken, and ignored
        (dict(pipe_size=0), "pipe_size", "0"),
        (dict(pipe_size=True), "pipe_size", "True"),  # was: a 1-byte pipe asked for
        (dict(pipe_size=4096.5), "pipe_size", "4096.5"),
    ],
    ids=["env-list", "env-str", "pipe-size-str", "pipe-size-negative", "pipe-size-zero", "pipe-size-bool",
         "pipe-size-float"],
)
def test_arguments_of_the_wrong_kind_are_config_errors_naming_them(kwargs, key, says):
    with pytest.raises(ConfigError) as info:
        renderd.launch(peer_argv("serve"), start_timeout=START, **kwargs)
    assert info.value.key == key
    assert says in str(info.value)


def test_args_none_means_no_extra_arguments():
    # env=None is "nothing added"; args=None raised TypeError 'NoneType' object is not iterable.
    with renderd.launch(peer_argv("serve"), args=None, start_timeout=START) as session:
        assert psutil.Process(session.pid).cmdline()[-1] != "None"
        assert session.step("Pass").sequence_id == 1


def test_a_close_while_another_threads_close_is_under_way_returns_once_the_player_is_stopped():
    # Two closes at once (a watchdog's and the main thread's `with` exit, an atexit hook): the second returned
    # at once, seeing the session marked closed, while the first still waited out the player's grace: the
    # player ran on, its pipe directory was still there, after close() had returned. The second now returns
    # once the first has released everything.
    import shlex
    import sys
    import threading

    from .conftest import PEER

    ignores_term = ["/bin/sh", "-c", f"trap '' TERM; exec {shlex.quote(sys.executable)} {shlex.quote(PEER)} serve"]
    session = renderd.launch(ignores_term, start_timeout=START)
    session.stop_grace = 0.5  # (it ignores SIGTERM: closing it takes the whole grace, then SIGKILL)
    directory = os.path.dirname(session.channel.server_path)
    player = psutil.Process(session.pid)
    first = threading.Thread(target=session.close)
    first.start()
    try:
        wait_for(lambda: session.closed, START, "the first close() to begin")
        session.close()
        assert not player.is_running(), "close() returned while the player still ran"
        assert not os.path.exists(directory), "close() returned before the pipe directory was removed"
    finally:
        first.join(15)


def test_a_close_at_interpreter_exit_does_not_wait_for_a_close_frozen_in_a_daemon_thread(tmp_path):
    # A daemon thread's close() waits out a player's grace when the program ends; a close() called during
    # the interpreter's finalization (an object's __del__ at module teardown) must not wait for it: that
    # thread never runs again, and the program would hang at exit.
    import subprocess
    import sys
    import textwrap

    from .conftest import PEER

    script = tmp_path / "exit_while_closing.py"
    script.write_text(textwrap.dedent(f"""
        import shlex, sys, threading, time
        import renderd

        player = ["/bin/sh", "-c", "trap '' TERM; exec " + shlex.quote(sys.executable) + " " + shlex.quote({PEER!r}) + " serve"]
        session = renderd.launch(player, start_timeout={START})
        session.stop_grace = 60  # (it ignores SIGTERM: the daemon thread's close waits all of it)
        threading.Thread(target=session.close, daemon=True).start()
        while not session.closed:
            time.sleep(0.01)

        class ClosesAtTeardown:
            def __del__(self):
                session.close()
                print("closed at teardown", flush=True)

        keeper = ClosesAtTeardown()
        print("exiting", flush=True)
    """))
    runtime = tmp_path / "child"  # (the frozen close never removes the pipe directory: keep it in tmp_path)
    runtime.mkdir()
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "TMPDIR": str(runtime)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["exiting", "closed at teardown"]


def test_close_from_a_signal_handler_leaves_the_interrupted_steps_pipes_alone_until_it_has_left():
    # A handler (SIGTERM from a job scheduler, an alarm) closes the session while this very thread's step
    # waits. close() closed the pipes at once, then waited out the player's grace inside the handler; the
    # step's poll, resumed after it, polled and read the closed numbers: EBADF, or whatever file
    # another thread had opened meanwhile under the same number. Now the player is stopped first and the
    # pipes are closed as the step leaves; it ends with a CallOrderError saying the session was closed, what
    # it saw being the player's end.
    import signal
    import threading

    from renderd.errors import CallOrderError, PlayerCrashed


    session = renderd.launch(peer_argv("serve"), start_timeout=START, step_timeout=60)
    action = {"action": "HalfThenHang"}  # (answered with half a message; the player then hangs)
    main = threading.main_thread()
    previous = signal.signal(signal.SIGUSR1, lambda *_: session.close())

    def close_when_waiting():
        wait_for(lambda: blocked_in_poll(main), START, "the step to wait")
        os.kill(os.getpid(), signal.SIGUSR1)

    closer = threading.Thread(target=close_when_waiting)
    closer.start()
    try:
        with pytest.raises(CallOrderError, match="closed") as info:
            session.step(action)
    finally:
        closer.join(START)
        signal.signal(signal.SIGUSR1, previous)
        session.close()
    cause = info.value.__cause__
    assert cause is None or isinstance(cause, PlayerCrashed), repr(cause)
    assert session.closed and session.channel.closed


def test_a_player_does_not_inherit_the_service_managers_variables(tmp_path, monkeypatch):
    # An agent run as a systemd service (Type=notify) has NOTIFY_SOCKET and the watchdog's variables: they
    # are about that process; a player that inherited them could tell systemd the service is ready or
    # stopping. An explicit env still sets what it names.
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify"))
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    dump = tmp_path / "env"
    wrapper = ["/bin/sh", "-c", f'env > {dump}; exec "$0" "$@"', "renderd-player", "--static-frame"]
    with renderd.launch(wrapper, width=32, height=32, start_timeout=START, env={"WATCHDOG_USEC": "1"}):
        names = dict(line.split("=", 1) for line in dump.read_text().splitlines() if "=" in line)
    assert "NOTIFY_SOCKET" not in names and "WATCHDOG_PID" not in names, sorted(names)
    assert names["WATCHDOG_USEC"] == "1"


@pytest.mark.parametrize("platform", ["headless", "CloudRendering"])
@pytest.mark.parametrize("x_display", [":0", "managed"])
def test_an_x_display_for_a_platform_that_uses_none_is_refused(platform, x_display):
    # (the daemon's configuration refuses it too; launch() ignored it without a word)
    with pytest.raises(ConfigError, match=r"is an X display for Linux64, and platform .* uses none") as caught:
        renderd.launch("renderd-player", width=32, height=32, platform=platform, x_display=x_display)
    assert caught.value.key == "x_display"
