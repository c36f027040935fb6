"""Review 8 of the reference player: each test drives a real player process over real FIFOs."""

from __future__ import annotations

import pytest

from renderd.protocol import encode_action
from tests.helpers.fifo_driver import PlayerExited

FAST = ["-screen-width", "16", "-screen-height", "16"]
#: Deadline for a prompt answer or exit (seconds).
PROMPT = 10.0


def ready(spawn, *args, **kwargs):
    p = spawn([*FAST, *args], **kwargs)
    p.start_session()
    return p


@pytest.mark.parametrize("next_action", [{"action": "Pass"}, {"action": "Pass", "sequenceId": 2**64},
                                         {"action": "Bogus"}])
def test_counting_on_past_the_largest_sequence_id_is_not_a_crash(spawn, next_action):
    # The largest sequenceId the player adopts is 2**64 - 1; an action after it without a usable
    # sequenceId (none, or one beyond 64 bits, which is refused) made the player count on to 2**64,
    # which msgpack cannot pack: the player died with exit code 3 instead of answering.
    p = ready(spawn)
    ev = p.step("Pass", sequenceId=2**64 - 1)
    assert ev and ev.sequence_id == 2**64 - 1
    p.send_raw_buffers(encode_action(next_action))
    try:
        ev = p.recv_event(timeout=PROMPT)
    except PlayerExited:
        pytest.fail(f"the player exited ({p.wait(PROMPT)}): {p.log_text()[-800:]}")
    assert ev.sequence_id == 0  # counted on, wrapping as an unsigned 64-bit number does
    assert ev.metadata["lastActionSuccess"] == (next_action == {"action": "Pass"})
    assert p.step("Pass", sequenceId=7).sequence_id == 7
    assert p.alive()


def test_a_malformed_first_message_over_http(tmp_path):
    # --fault-at-start garbage with AI2THOR_SERVER_TYPE=WSGI: the player logged "fault at start: garbage" and
    # then posted a good first message, so a boot-failure test over HTTP got a healthy player. It now posts a
    # first frame whose metadata is not JSON, as the per-step garbage fault does over HTTP.
    renderd = pytest.importorskip("renderd")
    from renderd.errors import ProtocolError

    log_path = tmp_path / "player.log"
    with pytest.raises(ProtocolError):
        with renderd.launch(width=16, height=16, transport="http", args=["--fault-at-start", "garbage"],
                            start_timeout=PROMPT, step_timeout=PROMPT, log_path=log_path):
            pass
    assert "malformed first message" in log_path.read_text(encoding="utf-8", errors="replace")


#: Runs the player's main() with an object whose finaliser, run while the interpreter shuts down (after
#: main() has returned and Python has put the default signal dispositions back), says so in a file and
#: waits until the test says (in PATH.sent) that it has sent its SIGTERM: the window in which a SIGTERM used
#: to kill the exiting player is held open until the signal is there.
_SLOW_EXIT = (
    "import os, sys, time\n"
    "class _SlowExit:\n"
    "    def __init__(self, path):\n"
    "        self.path, self.open, self.sleep = path, open, time.sleep\n"
    "        self.exists, self.monotonic = os.path.exists, time.monotonic\n"
    "    def __del__(self):\n"
    "        self.open(self.path, 'w').close()\n"
    "        deadline = self.monotonic() + 10\n"
    "        while not self.exists(self.path + '.sent') and self.monotonic() < deadline:\n"
    "            self.sleep(0.01)\n"
    "_slow_exit = _SlowExit(sys.argv[1])\n"
    "from renderd.player.__main__ import main\n"
    "sys.exit(main(sys.argv[2:]))\n"
)


def test_sigterm_while_the_player_exits_does_not_change_its_exit_status(spawn, tmp_path):
    # A client that closes client.pipe and then SIGTERMs its player (renderd's session close: 410 or EOF,
    # then SIGTERM) could catch it while the interpreter shut down: the player died of the SIGTERM (exit
    # status -15) instead of exiting 0, as docs/player.md promises for a SIGTERM wherever the player is.
    import signal
    import sys
    import time

    from tests.helpers.fifo_driver import player_command

    flag = tmp_path / "exiting"
    log = tmp_path / "slow.log"
    command = [sys.executable, "-c", _SLOW_EXIT, str(flag), *player_command([*FAST, "-logFile", str(log)])[3:]]
    p = spawn(command=command)
    p.start_session()
    p.close_client_pipe()  # the player's normal end: exit 0
    deadline = time.monotonic() + PROMPT
    while not flag.exists():
        assert time.monotonic() < deadline, f"the player did not reach its exit: {p.log_text()}"
        assert p.alive() or flag.exists(), f"exited {p.wait(PROMPT)} before its finaliser ran"
        time.sleep(0.01)
    p.proc.send_signal(signal.SIGTERM)
    (tmp_path / "exiting.sent").touch()  # (the signal is pending before the finaliser can see this)
    assert p.wait(PROMPT) == 0
    assert "the client closed client.pipe" in log.read_text()


#: Starts the player with signals blocked, as a process inherits its parent's signal mask across exec (a
#: launcher thread that blocked them for its own signal handling, say).
_BLOCKED = (
    "import os, signal, sys\n"
    "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT, signal.SIGSEGV})\n"
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])\n"
)


def _spawn_with_signals_blocked(spawn, tmp_path):
    import sys

    from tests.helpers.fifo_driver import player_command

    log = tmp_path / "blocked.log"
    p = spawn(command=[sys.executable, "-c", _BLOCKED, *player_command([*FAST, "-logFile", str(log)])[1:]])
    p.start_session()
    return p, log


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_sigterm_ends_a_player_started_with_signals_blocked(spawn, tmp_path, signame):
    # The player installed its handlers but left the inherited mask alone: with SIGTERM blocked a waiting
    # player never saw it (a supervisor's SIGTERM did nothing until its SIGKILL).
    import signal

    p, log = _spawn_with_signals_blocked(spawn, tmp_path)
    assert p.step("Pass")
    p.proc.send_signal(getattr(signal, signame))
    assert p.wait(PROMPT) == 0
    assert f"received {signame}; exiting" in log.read_text()


def test_the_segfault_fault_dies_of_sigsegv_even_if_it_was_blocked(spawn, tmp_path):
    import signal

    p, _ = _spawn_with_signals_blocked(spawn, tmp_path)
    p.send({"action": "RenderdFault", "fault": "segfault"})
    with pytest.raises(PlayerExited):
        p.recv_message(timeout=PROMPT)
    assert p.wait(PROMPT) == -signal.SIGSEGV


@pytest.mark.parametrize("action", [
    {"action": "RotateRight", "degrees": 359.99999},
    {"action": "RotateLeft", "degrees": 0.00001},
    {"action": "Teleport", "rotation": -0.00001},
    {"action": "Teleport", "rotation": {"x": 0, "y": 719.99999, "z": 0}},
])
def test_yaw_stays_below_360(spawn, action):
    # The yaw was taken modulo 360 and then rounded to 4 decimals, so a yaw just under 360 (or just under 0)
    # was reported as 360.0, outside [0, 360) as docs/player.md says; it is 0.
    p = ready(spawn)
    ev = p.step(action)
    assert ev, ev.metadata["errorMessage"]
    assert ev.metadata["agent"]["rotation"]["y"] == 0.0
