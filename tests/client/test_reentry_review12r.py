"""A signal handler's call of a session in the thread whose call of it is under way is refused, instead of
interleaving its action and answer with that call's on the pipes."""

from __future__ import annotations

import signal
import sys
import threading
import time

import pytest

import renderd
from renderd.errors import CallOrderError

# Answers each action with its sequenceId and its name as lastAction; reads no action until the file argv[1] exists.
_PLAYER = """
import os, sys, time
import msgpack
from renderd.protocol import NEED_DATA, Decoder, FieldType, encode_message, decode_action
gate = sys.argv[1]
def answer(seq, name):
    agent = {"screenWidth": 4, "screenHeight": 2, "lastAction": name, "lastActionSuccess": True}
    return encode_message([(FieldType.METADATA, msgpack.packb({"agents": [agent], "sequenceId": seq}))])
w = os.open(os.environ["AI2THOR_FIFO_SERVER_PIPE_PATH"], os.O_WRONLY)
os.writev(w, answer(0, ""))
r = os.open(os.environ["AI2THOR_FIFO_CLIENT_PIPE_PATH"], os.O_RDONLY)
while not os.path.exists(gate):
    time.sleep(0.005)
d = Decoder()
while True:
    data = os.read(r, 65536)
    if not data:
        break
    d.receive_data(data)
    while (m := d.next_message()) is not NEED_DATA:
        action = decode_action(m)
        os.writev(w, answer(action["sequenceId"], action["action"]))
"""


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signal handlers need the main thread")
def test_a_signal_handler_s_step_while_this_thread_s_step_writes_is_refused(tmp_path):
    # The outer step's action is larger than client.pipe holds, and the player reads nothing until the gate
    # exists: the step waits to write the rest. A SIGALRM handler opens the gate and steps. It was let in (the lock
    # is re-entrant for reset's own steps): it wrote the outer action's rest and its own, with the same sequenceId,
    # and took the outer action's answer as its own, and the outer step got the handler's.
    gate = tmp_path / "gate"
    session = renderd.launch(
        executable=[sys.executable, "-c", _PLAYER, str(gate)],
        width=4, height=2, platform="headless", start_timeout=20, step_timeout=10,
        log_path=str(tmp_path / "player.log"),
    )
    handled: list[object] = []

    def handler(signum, frame):
        gate.touch()
        try:
            handled.append(session.step("Pass"))
        except CallOrderError as exc:
            handled.append(exc)

    old = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        event = session.step({"action": "Big", "pad": "x" * (1 << 20)})
        deadline = time.monotonic() + 5.0
        while not handled:  # (the step cannot end before the handler opened the gate)
            assert time.monotonic() < deadline, "SIGALRM never came"
            time.sleep(0.005)
        assert isinstance(handled[0], CallOrderError), handled
        text = str(handled[0])
        assert "step() from a signal handler" in text, text
        assert "Nothing was sent or received" in text, text
        assert event.metadata["lastAction"] == "Big"
        assert session.step("Pass").metadata["lastAction"] == "Pass"  # (the session goes on)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        session.close()
