"""Fault hooks, startup faults, malformed client input, EOF and signals: each outcome observed for real."""

from __future__ import annotations

import os
import select
import signal
import time

import pytest

from renderd.errors import ProtocolError
from renderd.protocol import HEADER, MAX_ACTION_DEPTH, FieldType
from tests.helpers.fifo_driver import PlayerExited

FAST = ["-screen-width", "32", "-screen-height", "32"]
#: Deadline for things that must happen promptly (an exit after a fault, a log line).
PROMPT = 10.0


def ready(spawn, *args, **kwargs):
    p = spawn([*FAST, *args], **kwargs)
    p.start_session()
    return p


def wait_for_log(p, text: str, timeout: float = PROMPT) -> str:
    deadline = time.monotonic() + timeout
    while True:
        log = p.log_text()
        if text in log:
            return log
        if time.monotonic() > deadline:
            raise AssertionError(f"{text!r} not in the player's log within {timeout} s:\n{log}")
        time.sleep(0.01)


def fault(p, kind: str, **params):
    p.send({"action": "RenderdFault", "fault": kind, **params})


@pytest.mark.parametrize("kind, returncode", [("abort", -signal.SIGABRT), ("segfault", -signal.SIGSEGV)])
def test_crash_faults_die_of_the_signal(spawn, kind, returncode):
    p = ready(spawn)
    fault(p, kind)
    with pytest.raises(PlayerExited):
        p.recv_message()
    assert p.wait() == returncode
    assert f"fault: {'abort' if kind == 'abort' else 'segmentation fault'}" in p.log_text()


def test_exit_fault_with_code(spawn):
    p = ready(spawn)
    fault(p, "exit", code=7)
    with pytest.raises(PlayerExited):
        p.recv_message()
    assert p.wait() == 7
    assert "fault: exit with code 7" in p.log_text()


def test_exit_after_answering(spawn):
    p = ready(spawn)
    fault(p, "exit", code=5, when="after")
    ev = p.recv_event()
    assert ev and ev.metadata["lastAction"] == "RenderdFault"
    with pytest.raises(PlayerExited):
        p.recv_message()
    assert p.wait() == 5


def test_hang_stays_alive_until_sigterm(spawn):
    p = ready(spawn)
    fault(p, "hang")
    with pytest.raises(TimeoutError):
        p.recv_message(timeout=0.5)
    assert p.alive()
    assert p.terminate() == 0
    log = p.log_text()
    assert "fault: hanging" in log and "received SIGTERM" in log


def test_sleep_then_answer(spawn):
    p = ready(spawn)
    started = time.monotonic()
    fault(p, "sleep", seconds=0.3)
    ev = p.recv_event()
    assert time.monotonic() - started >= 0.3
    assert ev and ev.metadata["lastAction"] == "RenderdFault"
    assert p.step("Pass")


def test_garbage_is_a_protocol_error(spawn):
    p = ready(spawn)
    fault(p, "garbage")
    with pytest.raises(ProtocolError, match="unknown field type 42"):
        p.recv_message()
    assert p.alive()
    assert p.terminate() == 0


def test_oversize_header_is_rejected_from_the_header(spawn):
    p = ready(spawn)
    fault(p, "oversize")
    with pytest.raises(ProtocolError, match="over the limit"):
        p.recv_message()
    assert p.alive()
    p.close_client_pipe()  # the silent player leaves when the client does
    assert p.wait(PROMPT) == 0


def test_truncate_ends_inside_a_body(spawn):
    p = ready(spawn)
    fault(p, "truncate", code=3)
    with pytest.raises(ProtocolError, match="end of input inside the body of a METADATA field"):
        p.recv_message()
    assert p.wait(PROMPT) == 3


def test_close_mid_message_while_alive(spawn):
    p = ready(spawn)
    fault(p, "close")
    with pytest.raises(ProtocolError, match="end of input inside a message"):
        p.recv_message()
    assert p.alive()  # EOF does not mean the process is gone
    p.close_client_pipe()
    assert p.wait(PROMPT) == 0


def test_bad_fault_parameters_are_answered(spawn):
    p = ready(spawn)
    ev = p.step({"action": "RenderdFault", "fault": "meltdown"})
    assert not ev and ev.metadata["errorCode"] == "InvalidArgument"
    assert p.step("Pass")


# -- startup faults ---------------------------------------------------------------------------------------
def test_start_fault_no_open(spawn):
    p = spawn([*FAST, "--fault-at-start", "no-open"])
    assert p.wait(PROMPT) == 1
    assert "opening" not in p.log_text()


@pytest.mark.parametrize("kind, returncode", [("exit", 1), ("abort", -signal.SIGABRT), ("segfault", -signal.SIGSEGV)])
def test_start_fault_dies_after_opening(spawn, kind, returncode):
    p = spawn([*FAST, "--fault-at-start", kind])
    with pytest.raises(PlayerExited):  # EOF before any byte: no first message
        p.recv_message()
    assert p.wait(PROMPT) == returncode


def test_start_fault_from_environment(spawn):
    p = spawn(FAST, env={"RENDERD_PLAYER_FAULT_AT_START": "exit"})
    with pytest.raises(PlayerExited):
        p.recv_message()
    assert p.wait(PROMPT) == 1


def test_start_fault_hang_before_open(spawn):
    p = spawn([*FAST, "--fault-at-start", "hang"])
    wait_for_log(p, "fault: hanging")
    p.open_server()
    readable, _, _ = select.select([p.server_fd], [], [], 0.3)
    assert readable == [] and p.alive()  # no writer ever connected: no data, no EOF
    assert p.terminate() == 0


def test_start_fault_hang_after_open(spawn):
    p = spawn([*FAST, "--fault-at-start", "hang-open"])
    with pytest.raises(TimeoutError):
        p.recv_message(timeout=0.5)
    wait_for_log(p, "fault: hanging")
    assert p.alive()
    assert p.terminate() == 0


def test_start_fault_garbage(spawn):
    p = spawn([*FAST, "--fault-at-start", "garbage"])
    with pytest.raises(ProtocolError, match="unknown field type"):
        p.recv_message()


def test_start_delay(spawn):
    started = time.monotonic()
    p = spawn([*FAST, "--start-delay", "0.4"])
    p.start_session()
    assert time.monotonic() - started >= 0.4


# -- the client misbehaves or leaves ---------------------------------------------------------------------
def test_bad_json_action_ends_the_player(spawn):
    p = ready(spawn)
    body = b"{not json"
    p.send_raw_buffers([HEADER.pack(FieldType.ACTION, len(body)), body, HEADER.pack(255, 0)])
    with pytest.raises(PlayerExited):
        p.recv_message()
    assert p.wait(PROMPT) == 4
    assert "malformed message from the client" in p.log_text()


def _raw_action(body: bytes) -> list[bytes]:
    return [HEADER.pack(FieldType.ACTION, len(body)), body, HEADER.pack(255, 0)]


@pytest.mark.parametrize("depth, seq", [(50_000, None), (MAX_ACTION_DEPTH + 10, 1)])
def test_an_action_nested_too_deeply_is_answered_as_failed(spawn, depth, seq):
    # Framed correctly, so the player answers it (InvalidArgument) and goes on; a RecursionError from the
    # JSON parser must not reach main() as an unhandled error (exit 3).
    p = ready(spawn)
    head = b'{"action":"Pass","sequenceId":1,' if seq is not None else b'{"action":"Pass",'
    p.send_raw_buffers(_raw_action(head + b'"x":' + b"[" * depth + b"]" * depth + b"}"))
    event = p.recv_event(timeout=PROMPT)
    md = event.metadata
    assert md["lastActionSuccess"] is False and md["errorCode"] == "InvalidArgument"
    assert "nests arrays or objects" in md["errorMessage"]
    assert event.sequence_id == 1  # echoed, or counted on from the first message's 0
    assert p.step("MoveAhead", sequenceId=2).metadata["lastActionSuccess"]
    assert p.alive()


@pytest.mark.parametrize("digits", [b"9" * 5000, b"-" + b"9" * 5000], ids=["positive", "negative"])
def test_an_integer_with_thousands_of_digits_is_an_invalid_argument(spawn, digits):
    # Valid JSON: int() refuses over 4,300 digits, but the number is answered like one too large for a float.
    p = ready(spawn)
    p.send_raw_buffers(_raw_action(b'{"action":"MoveAhead","sequenceId":1,"moveMagnitude":' + digits + b"}"))
    md = p.recv_event(timeout=PROMPT).metadata
    assert md["lastActionSuccess"] is False and md["errorCode"] == "InvalidArgument"
    assert "moveMagnitude must be a finite number" in md["errorMessage"]
    assert p.step("Pass", sequenceId=2).metadata["lastActionSuccess"]


def test_bad_framing_from_the_client_ends_the_player(spawn):
    p = ready(spawn)
    p.send_raw_buffers([bytes([77, 0, 0, 0, 1, 0])])
    with pytest.raises(PlayerExited):
        p.recv_message()
    assert p.wait(PROMPT) == 4
    assert "unknown field type 77" in p.log_text()


def test_client_closing_client_pipe_ends_the_player_cleanly(spawn):
    p = ready(spawn)
    assert p.step("Pass")
    p.close_client_pipe()
    with pytest.raises(PlayerExited):
        p.recv_message()
    assert p.wait(PROMPT) == 0
    assert "the client closed client.pipe after 1 step(s)" in p.log_text()


def test_client_closing_mid_action_is_an_error(spawn):
    p = ready(spawn)
    p.send_raw_buffers([HEADER.pack(FieldType.ACTION, 100), b"{"])
    p.close_client_pipe()
    assert p.wait(PROMPT) == 4
    assert "end of input inside the body" in p.log_text()


def test_client_closing_server_pipe_gives_epipe(spawn):
    p = ready(spawn)
    os.close(p.server_fd)
    p.server_fd = None
    p.send("Pass")
    assert p.wait(PROMPT) == 1
    assert "EPIPE" in p.log_text()


# -- signals -----------------------------------------------------------------------------------------------
def test_sigterm_while_serving(spawn):
    p = ready(spawn)
    started = time.monotonic()
    assert p.terminate() == 0
    assert time.monotonic() - started < 2.0
    assert "received SIGTERM" in p.log_text()


def test_sigterm_while_blocked_opening_server_pipe(spawn):
    p = spawn(FAST)
    wait_for_log(p, "for writing")  # blocked in open(): nobody reads server.pipe
    assert p.terminate() == 0
    assert "received SIGTERM" in p.log_text()


def test_sigint_also_exits_cleanly(spawn):
    p = ready(spawn)
    p.proc.send_signal(signal.SIGINT)
    assert p.wait(PROMPT) == 0
    assert "received SIGINT" in p.log_text()


def test_a_huge_bad_fault_parameter_is_answered_and_logged_cut_short(spawn):
    # The refusal quotes the client's value: the answer's errorMessage and the log line are both cut short.
    p = ready(spawn)
    ev = p.step({"action": "RenderdFault", "fault": "x" * 1_000_000})
    assert not ev and ev.metadata["errorCode"] == "InvalidArgument" and len(ev.metadata["errorMessage"]) <= 500
    assert p.step("Pass")
    log = wait_for_log(p, "rejected fault action")
    assert len(log) < 10_000
