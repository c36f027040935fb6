"""A session is used by one thread at a time: a call from a second thread while one is inside is refused at
once with an error that says so, instead of interleaving actions and answers on the pipes."""

from __future__ import annotations

import sys
import threading
import time

import pytest

import renderd
from renderd.client import SessionState
from renderd.errors import CallOrderError

# Answers each action with its sequenceId, logging the action's name first; holds its first answer until the
# file argv[2] exists.
_PLAYER = """
import os, sys, time
import msgpack
from renderd.protocol import NEED_DATA, Decoder, FieldType, encode_message, decode_action
log, gate = sys.argv[1], sys.argv[2]
def answer(seq):
    agent = {"screenWidth": 4, "screenHeight": 2, "lastAction": "Pass", "lastActionSuccess": True}
    return encode_message([(FieldType.METADATA, msgpack.packb({"agents": [agent], "sequenceId": seq}))])
w = os.open(os.environ["AI2THOR_FIFO_SERVER_PIPE_PATH"], os.O_WRONLY)
os.writev(w, answer(0))
r = os.open(os.environ["AI2THOR_FIFO_CLIENT_PIPE_PATH"], os.O_RDONLY)
d = Decoder()
first = True
while True:
    data = os.read(r, 65536)
    if not data:
        break
    d.receive_data(data)
    while (m := d.next_message()) is not NEED_DATA:
        action = decode_action(m)
        with open(log, "a") as f:
            f.write(action["action"] + "\\n")
        while first and not os.path.exists(gate):
            time.sleep(0.005)
        first = False
        os.writev(w, answer(action["sequenceId"]))
"""


def _wait_for(predicate, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_a_second_thread_s_calls_are_refused_while_a_step_waits(tmp_path):
    log, gate = tmp_path / "actions", tmp_path / "gate"
    session = renderd.launch(
        executable=[sys.executable, "-c", _PLAYER, str(log), str(gate)],
        width=4, height=2, platform="headless", start_timeout=20, step_timeout=10,
        log_path=str(tmp_path / "player.log"),
    )
    try:
        got = {}
        stepper = threading.Thread(target=lambda: got.setdefault("event", session.step("MoveAhead")), name="stepper")
        stepper.start()
        _wait_for(lambda: log.exists() and log.read_text() == "MoveAhead\n")  # it waits for its answer now
        calls = {
            "step()": lambda: session.step("RotateLeft"),
            "send()": lambda: session.send("RotateLeft"),
            "recv()": lambda: session.recv(),
            "reset()": lambda: session.reset(),
            "wait_ready()": lambda: session.wait_ready(),
        }
        for what, call in calls.items():
            started = time.monotonic()
            with pytest.raises(CallOrderError) as info:
                call()
            assert time.monotonic() - started < 1  # refused at once, not after the other's step
            message = str(info.value)
            assert message.startswith(f"{what} in thread 'MainThread' while thread 'stepper' is inside a call")
            assert "one thread at a time" in message and "Nothing was sent" in message
        assert session.state is SessionState.PENDING  # the stepper's step is untouched
        gate.touch()
        stepper.join(10)
        assert not stepper.is_alive()
        assert got["event"].sequence_id == 1
        assert log.read_text() == "MoveAhead\n"  # nothing of the refused calls reached the player
        # One thread after another is fine.
        assert session.step("Pass").sequence_id == 2 and session.state is SessionState.READY
    finally:
        gate.touch()
        session.close()


def test_after_a_close_the_refusal_says_closed(tmp_path):
    # close() from another thread while a step waits: a call made then is told the session is closed (not
    # that a thread is inside it, though the stepper may not have left yet).
    log, gate = tmp_path / "actions", tmp_path / "gate"
    session = renderd.launch(
        executable=[sys.executable, "-c", _PLAYER, str(log), str(gate)],
        width=4, height=2, platform="headless", start_timeout=20, step_timeout=10,
        log_path=str(tmp_path / "player.log"),
    )
    errors = []

    def step():
        try:
            session.step("MoveAhead")
        except CallOrderError as exc:
            errors.append(exc)

    stepper = threading.Thread(target=step, name="stepper")
    try:
        stepper.start()
        _wait_for(lambda: log.exists() and log.read_text() == "MoveAhead\n")
        closer = threading.Thread(target=session.close, name="closer")
        closer.start()
        _wait_for(lambda: session.closed)
        with pytest.raises(CallOrderError, match=r"^step\(\) on a closed session"):
            session.step("Pass")
        closer.join(10)
        stepper.join(10)
        assert not closer.is_alive() and not stepper.is_alive()
        assert errors and "closed" in str(errors[0])
    finally:
        gate.touch()
        session.close()
