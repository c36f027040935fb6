"""A vector session is used by one call at a time: a call from another thread, or from on_event, while one is under
way is refused at once, and the call under way goes on."""

from __future__ import annotations

import threading
import time

import pytest

from renderd.errors import CallOrderError
from tests.vector.conftest import wait_for

SLEEP = {"action": "RenderdFault", "fault": "sleep", "seconds": 0.6}


def test_a_second_thread_s_recv_is_refused_while_a_step_waits(no_leaks, launch):
    # The second thread's recv polled the same poll object as the step's ("RuntimeError: concurrent poll()
    # invocation") or took answers of the step's round, and the error it raised was kept as the vector's.
    vs = launch(2)
    out: dict[str, object] = {}

    def step() -> None:
        try:
            out["step"] = vs.step([SLEEP, "Pass"])
        except BaseException as exc:  # noqa: BLE001 - (reported by the asserts)
            out["step"] = exc

    thread = threading.Thread(target=step, name="stepper")
    thread.start()
    try:
        wait_for(lambda: vs.pending, 10.0, "the step to send its actions")
        started = time.monotonic()
        with pytest.raises(CallOrderError) as info:
            vs.recv()
        # (at once, not once the step is over: the step, 0.6 s of it a player's sleep, is still under way)
        assert "step" not in out and thread.is_alive(), f"refused after {time.monotonic() - started:.2f} s"
        text = str(info.value)
        assert "recv() in thread 'MainThread' while thread 'stepper' is inside step() of this VectorSession" in text
        assert "Nothing was sent or received" in text
        with pytest.raises(CallOrderError, match="while thread 'stepper' is inside step()"):
            vs.reset_async()
    finally:
        thread.join(10.0)
    result = out["step"]
    assert not isinstance(result, BaseException), result
    assert [e.last_action for e in result.observations] == ["RenderdFault", "Pass"]
    assert vs.error is None
    assert [e.last_action for e in vs.step(["Pass", "Pass"]).observations] == ["Pass", "Pass"]


def test_a_call_from_on_event_is_refused(no_leaks, launch):
    vs = launch(2)
    refused: list[BaseException] = []

    def on_event(slot: int, event: object) -> None:
        try:
            vs.recv()
        except CallOrderError as exc:
            refused.append(exc)

    vs.on_event = on_event
    out = vs.step(["Pass", "Pass"])
    assert [e.last_action for e in out.observations] == ["Pass", "Pass"]
    assert len(refused) == 2, refused
    assert "recv() from on_event (or reward_fn, done_fn, a signal handler) while this thread is inside step()" in str(
        refused[0]
    )
    assert vs.error is None
