"""Launching and closing a player, review 8: text no process can be given, and a session closed from another
thread while a step waits. Real processes and real FIFOs; nothing may be left behind (``no_leaks``)."""

from __future__ import annotations

import os
import threading
import time

import pytest

import renderd
from renderd.errors import CallOrderError, ConfigError

from .conftest import START, close_while_stepping, peer_argv, wait_for

pytestmark = pytest.mark.usefixtures("no_leaks")


@pytest.mark.parametrize(
    ("kwargs", "key", "where"),
    [
        (dict(env={"RENDERD_TEST_X": "caf\u00e9 \ud800"}), "env", "RENDERD_TEST_X"),
        (dict(env={"RENDERD_TEST_\ud800": "x"}), "env", "RENDERD_TEST_"),
        (dict(args=["--name=\udfff"]), "args", "--name="),
        (dict(log_path="player-\ud800.log"), "log_path", "player-"),
    ],
    ids=["value", "name", "arg", "log-path"],
)
def test_text_with_a_lone_surrogate_is_a_config_error_naming_it(kwargs, key, where):
    # No process can be given a lone surrogate (it has no UTF-8 bytes): a ConfigError naming the argument,
    # not a bare UnicodeEncodeError from deep inside subprocess, and nothing started.
    with pytest.raises(ConfigError) as info:
        renderd.launch(peer_argv("serve"), start_timeout=START, **kwargs)
    assert info.value.key == key
    assert where in str(info.value)


def test_non_ascii_text_reaches_the_player(tmp_path):
    # (Non-ASCII text that has bytes, surrogate-escaped undecodable bytes included, goes through as it is.)
    log_path = tmp_path / "journal-\u00e9t\u00e9.log"
    env = {"RENDERD_TEST_X": "caf\u00e9 \u2603", "RENDERD_TEST_RAW": os.fsdecode(b"raw-\xff")}
    with renderd.launch(peer_argv("serve"), env=env, log_path=log_path, start_timeout=START) as session:
        with open(f"/proc/{session.pid}/environ", "rb") as f:
            seen = f.read().split(b"\0")
        with open(f"/proc/{session.pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    assert "RENDERD_TEST_X=caf\u00e9 \u2603".encode() in seen
    assert b"RENDERD_TEST_RAW=raw-\xff" in seen
    assert os.fsencode(log_path) in argv and log_path.exists()


def _waiting_in(session, thread: threading.Thread) -> bool:
    """Whether ``thread`` is blocked inside the session's send or receive (its stack shows it)."""
    import sys

    frame = sys._current_frames().get(thread.ident)
    while frame is not None:
        if frame.f_code.co_name in ("_receive", "_send", "_write_rest", "_open_writer") and \
                frame.f_code.co_filename.endswith(("client.py", "fifo.py")):
            return True
        frame = frame.f_back
    return False


@pytest.mark.parametrize("waiting_in", ["recv", "send"])
def test_close_from_another_thread_ends_a_waiting_step_with_a_call_order_error(waiting_in):
    # A watchdog thread closes the session while the main thread's step waits: for an answer that stops
    # halfway (recv), or for room to write a large action to a player that reads nothing (send). The step
    # ends at once with a CallOrderError saying the session was closed, never with an error about a
    # descriptor closed under it (EBADF), a descriptor that meanwhile belongs to another file (EISDIR,
    # garbage bytes), or a "crash" that was the close itself. Other threads open files all the while, so a
    # descriptor number freed under the waiting step is soon taken again.
    stop_churn = threading.Event()

    def churn():
        while not stop_churn.is_set():
            fds = [os.open("/proc/self/stat", os.O_RDONLY) for _ in range(4)]
            for fd in fds:
                os.close(fd)
            time.sleep(0)

    churner = threading.Thread(target=churn, daemon=True)
    churner.start()
    try:
        for _ in range(4):
            if waiting_in == "recv":
                session = renderd.launch(peer_argv("serve"), start_timeout=START, step_timeout=60)
                action = {"action": "HalfThenHang"}
            else:
                session = renderd.launch(peer_argv("slow-reader", 3600), start_timeout=START, step_timeout=60)
                action = {"action": "Big", "payload": "x" * (4 << 20)}
            outcome: dict[str, BaseException | None] = {}

            def step():
                try:
                    session.step(action)
                    outcome["error"] = None
                except BaseException as exc:  # noqa: BLE001 - the test looks at it
                    outcome["error"] = exc

            close_while_stepping(session, step, lambda stepper: _waiting_in(session, stepper))
            error = outcome["error"]
            assert isinstance(error, CallOrderError), repr(error)
            assert "closed" in str(error)
            assert session.closed
    finally:
        stop_churn.set()
        churner.join(5)


def _interrupt_at(function, text: str):
    """A trace function raising KeyboardInterrupt (as Ctrl-C would) when ``function`` reaches the line
    holding ``text``."""
    import inspect

    lines, first = inspect.getsourcelines(function)
    target = first + next(i for i, line in enumerate(lines) if text in line)
    code = function.__code__

    def local(frame, event, arg):
        if event == "line" and frame.f_lineno == target:
            raise KeyboardInterrupt
        return local

    def tracer(frame, event, arg):
        return local if frame.f_code is code else None

    return tracer


@pytest.mark.parametrize("line", ["keep_log = log_path is not None", "endpoint = player_env(",
                                  'endpoint.pop("AI2THOR_SERVER_SIDE_SCREENSHOT")'])
def test_ctrl_c_after_the_pipes_are_made_leaves_nothing(line):
    # Ctrl-C once launch() has made the pipe directory and opened server.pipe, before the player is
    # started: the directory and the descriptor go too (no_leaks checks both).
    import sys

    from renderd import client

    sys.settrace(_interrupt_at(client.launch, line))
    try:
        with pytest.raises(KeyboardInterrupt):
            renderd.launch(peer_argv("serve"), start_timeout=START)
    finally:
        sys.settrace(None)


def test_ctrl_c_while_close_waits_for_another_threads_step_still_closes_the_pipes():
    # close() from one thread while another's step waits stops the player, then waits for that step to
    # leave the pipes. Interrupted there, it still closes the pipes and runs the rest of its cleanup.
    import sys

    session = renderd.launch(peer_argv("serve"), start_timeout=START, step_timeout=60)
    stepper = threading.Thread(target=lambda: pytest.raises(CallOrderError, session.step, "HalfThenHang"))
    stepper.start()
    try:
        wait_for(lambda: _waiting_in(session, stepper), START, "the step to wait")
        sys.settrace(_interrupt_at(renderd.Session.close, "while self._other_thread_inside():"))
        try:
            with pytest.raises(KeyboardInterrupt):
                session.close()
        finally:
            sys.settrace(None)
        assert session.closed and session.channel.closed
    finally:
        session.close()
        stepper.join(15)


@pytest.mark.parametrize(
    "args",
    ["--static-frame", b"--static-frame", [b"--static-frame"], [None], ["-n", True], [["--nested"]]],
    ids=["a-string", "bytes", "bytes-item", "none-item", "bool-item", "list-item"],
)
def test_args_that_are_surely_a_mistake_are_config_errors(args):
    # args="--static-frame" was taken as 14 one-character arguments, and b"--x" / None reached the player as
    # "b'--x'" / "None": each is a ConfigError (key args) before anything starts.
    with pytest.raises(ConfigError) as info:
        renderd.launch(peer_argv("serve"), args=args, start_timeout=START)
    assert info.value.key == "args"


def test_numbers_and_paths_in_args_are_written_out(tmp_path):
    import psutil

    with renderd.launch(peer_argv("serve"), args=("-n", 3, 0.5, tmp_path), start_timeout=START) as session:
        assert psutil.Process(session.pid).cmdline()[-4:] == ["-n", "3", "0.5", str(tmp_path)]
