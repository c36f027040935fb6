"""Fault hooks: ways to make the reference player misbehave on purpose, for tests.

A client triggers one with the action ``{"action": "RenderdFault", "fault": KIND, ...}``; the player can
also misbehave at startup (``--fault-at-start KIND``, or ``RENDERD_PLAYER_FAULT_AT_START``).

Process faults (any transport; :func:`run_process_fault`):

=========  ====================================================================================
abort      log, then ``os.abort()``: the process dies of SIGABRT (as Unity does on a fatal error)
segfault   log, then SIGSEGV with the default disposition: the process dies of SIGSEGV
exit       log, then exit with ``code`` (default 1) without answering
hang       stay alive and never answer (blocked waiting for a signal); SIGTERM still ends it (exit 0)
sleep      sleep ``seconds`` (default 1.0), then answer the action normally
=========  ====================================================================================

Stream faults (they need the byte stream; the FIFO link implements them with the helpers below):

=========  ====================================================================================
garbage    send a message whose first field has the unknown type 42 (then keep serving)
oversize   send a field header declaring a 4 GiB - 1 byte RGB body, then go silent (alive, never
           answers again; exits 0 when the client closes client.pipe, or on SIGTERM)
truncate   send the METADATA field header and half its body, close server.pipe, exit with ``code``
           (default 1)
close      send a complete METADATA field without the end-of-message marker, close server.pipe, and
           stay alive (exits 0 when the client closes client.pipe, or on SIGTERM)
=========  ====================================================================================

``when``: ``"now"`` (default) misbehaves instead of answering; ``"after"`` answers the action normally
first, then misbehaves (process faults only: the player dies, hangs or sleeps between steps).
"""

from __future__ import annotations

import logging
import os
import signal
import struct
import sys
from dataclasses import dataclass
from typing import Any, Callable, NoReturn, TypeVar

from renderd.player import signals
from renderd.protocol import END_OF_MESSAGE, HEADER, FieldType

__all__ = [
    "FAULT_ACTION",
    "FAULT_ARGUMENTS",
    "PROCESS_FAULTS",
    "STREAM_FAULTS",
    "START_FAULTS",
    "GARBAGE_FIELD_TYPE",
    "DEFAULT_SLEEP",
    "DEFAULT_FAULT_EXIT_CODE",
    "Fault",
    "FaultError",
    "parse_fault",
    "run_process_fault",
    "serve_action",
    "crash",
    "hang",
    "garbage_message",
    "oversize_header",
    "truncated_message",
    "unterminated_message",
]

FAULT_ACTION = "RenderdFault"
PROCESS_FAULTS = ("abort", "segfault", "exit", "hang", "sleep")
STREAM_FAULTS = ("garbage", "oversize", "truncate", "close")
#: ``--fault-at-start``: no-open exits before opening server.pipe; hang hangs before opening it;
#: hang-open opens it and then hangs; exit/abort/segfault open it and die before the first message;
#: garbage opens it and sends a malformed first message (then serves normally).
START_FAULTS = ("no-open", "hang", "hang-open", "exit", "abort", "segfault", "garbage")
#: Exit code of ``--fault-at-start exit`` / ``no-open`` and the default of the exit and truncate faults.
DEFAULT_FAULT_EXIT_CODE = 1
#: A field type no valid stream contains (valid types are 1-16 and 255).
GARBAGE_FIELD_TYPE = 42
DEFAULT_SLEEP = 1.0
#: Longest ``sleep`` fault accepted, so a typo cannot stall a test run for hours.
MAX_SLEEP = 3600.0

_WHEN = ("now", "after")
#: What a RenderdFault action takes (besides the keys every action may carry, ``renderd.player.core.STEP_KEYS``):
#: any other argument is refused (``InvalidArgument``) before a fault runs, as a misspelt one would otherwise run the
#: fault with that parameter's default.
FAULT_ARGUMENTS = ("fault", "code", "seconds", "when")

logger = logging.getLogger(__name__)


class FaultError(ValueError):
    """A RenderdFault action with an unknown kind or bad parameters (answered as InvalidArgument)."""


@dataclass(frozen=True)
class Fault:
    kind: str
    code: int = DEFAULT_FAULT_EXIT_CODE
    seconds: float = DEFAULT_SLEEP
    when: str = "now"

    @property
    def is_stream_fault(self) -> bool:
        return self.kind in STREAM_FAULTS


def parse_fault(action: dict) -> Fault | None:
    """The fault an action asks for, or ``None`` if it is not a RenderdFault action.

    Raises :class:`FaultError` when the kind or a parameter is invalid, or the action has an argument a RenderdFault
    does not take (:data:`FAULT_ARGUMENTS`).
    """
    if action.get("action") != FAULT_ACTION:
        return None
    from renderd.player.core import ActionFailed, _check_arguments  # (core imports this module)

    try:
        _check_arguments(FAULT_ACTION, action)
    except ActionFailed as exc:
        raise FaultError(exc.message) from None
    kind = action.get("fault")
    if kind not in PROCESS_FAULTS + STREAM_FAULTS:
        raise FaultError(
            f"unknown fault {kind!r} (expected one of {', '.join(PROCESS_FAULTS + STREAM_FAULTS)})"
        )
    code = action.get("code", DEFAULT_FAULT_EXIT_CODE)
    if not isinstance(code, int) or isinstance(code, bool) or not 0 <= code <= 255:
        raise FaultError(f"fault code must be an integer 0-255, got {code!r}")
    seconds = action.get("seconds", DEFAULT_SLEEP)
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not 0 <= seconds <= MAX_SLEEP:
        raise FaultError(f"fault seconds must be a number 0-{MAX_SLEEP:g}, got {seconds!r}")
    when = action.get("when", "now")
    if when not in _WHEN:
        raise FaultError(f"fault when must be one of {', '.join(_WHEN)}, got {when!r}")
    if when == "after" and kind in STREAM_FAULTS:
        raise FaultError(f"when='after' applies to process faults only, not {kind!r}")
    return Fault(kind, code, float(seconds), when)


def _flush_logs() -> None:
    for handler in logging.getLogger().handlers:
        try:
            handler.flush()
        except Exception:  # a broken log must not stop the fault from happening
            pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def crash(kind: str, code: int = DEFAULT_FAULT_EXIT_CODE) -> NoReturn:
    """End the process now: ``abort`` (SIGABRT), ``segfault`` (SIGSEGV) or ``exit`` (with ``code``)."""
    signals.exiting()  # a SIGTERM while the fault is logged must not turn it into a clean exit
    if kind == "abort":
        logger.error("fault: abort (SIGABRT)")
        _flush_logs()
        signal.signal(signal.SIGABRT, signal.SIG_DFL)
        os.abort()
    if kind == "segfault":
        logger.error("fault: segmentation fault (SIGSEGV)")
        _flush_logs()
        signal.signal(signal.SIGSEGV, signal.SIG_DFL)  # past faulthandler, if it is enabled
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGSEGV})  # in case it was started blocked
        os.kill(os.getpid(), signal.SIGSEGV)  # delivered before kill() returns
        os._exit(128 + signal.SIGSEGV)  # never reached
    logger.error("fault: exit with code %d", code)
    _flush_logs()
    os._exit(code)


def hang() -> NoReturn:
    """Stay alive and do nothing until SIGTERM/SIGINT (raises :class:`~renderd.player.signals.Terminated`)."""
    logger.warning("fault: hanging (alive, never answering)")
    _flush_logs()
    signals.wait_forever()
    raise AssertionError("unreachable")


def run_process_fault(fault: Fault) -> None:
    """Carry out a process fault. Returns only for ``sleep`` (after sleeping); the others never return."""
    if fault.kind == "sleep":
        logger.warning("fault: sleeping %.3f s before answering", fault.seconds)
        signals.sleep(fault.seconds)
        return
    if fault.kind == "hang":
        hang()
    if fault.kind in ("abort", "segfault", "exit"):
        crash(fault.kind, fault.code)
    raise FaultError(f"{fault.kind!r} is not a process fault")


_T = TypeVar("_T")


def serve_action(player: Any, action: dict, answer: Callable[[Any], _T],
                 stream_fault: Callable[[Fault, dict], _T]) -> _T:
    """Answer one action the way every link does; returns what ``answer`` or ``stream_fault`` returns.

    An ordinary action: ``answer(player.answer(action))``. A malformed ``RenderdFault`` action is answered
    as a failed action. A process fault runs before the answer, or after it with ``"when": "after"``
    (only ``sleep`` returns from it); a stream fault is the link's own ``stream_fault(fault, action)``.
    """
    try:
        fault = parse_fault(action)
    except FaultError as exc:
        from renderd.player.core import MAX_ERROR_MESSAGE, _clip  # (core imports this module)

        # Cut as the answer's errorMessage is: the message quotes the client's values.
        logger.warning("rejected fault action: %s", _clip(str(exc), MAX_ERROR_MESSAGE))
        return answer(player.rejected_answer(action, str(exc), "InvalidArgument"))
    if fault is None:
        return answer(player.answer(action))
    logger.warning("fault requested: %s", fault)
    if fault.is_stream_fault:
        return stream_fault(fault, action)
    if fault.when == "after":
        result = answer(player.answer(action))
        run_process_fault(fault)  # sleep returns; the rest never do
        return result
    run_process_fault(fault)
    return answer(player.answer(action))


def garbage_message() -> bytes:
    """A message whose first field has the unknown type :data:`GARBAGE_FIELD_TYPE`."""
    body = b"this is not a field a player may send"
    return struct.pack("!BI", GARBAGE_FIELD_TYPE, len(body)) + body + END_OF_MESSAGE


def oversize_header() -> bytes:
    """A RGB_IMAGE field header declaring a body of 2**32 - 1 bytes (over any sane limit)."""
    return HEADER.pack(FieldType.RGB_IMAGE, 0xFFFFFFFF)


def truncated_message(metadata: bytes) -> bytes:
    """The METADATA header for ``metadata`` followed by only half of its body."""
    return HEADER.pack(FieldType.METADATA, len(metadata)) + metadata[: len(metadata) // 2]


def unterminated_message(metadata: bytes) -> bytes:
    """A complete METADATA field with no end-of-message marker after it."""
    return HEADER.pack(FieldType.METADATA, len(metadata)) + metadata
