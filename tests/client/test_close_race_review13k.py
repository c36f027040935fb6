"""Session.close() from another thread while a step is just beginning in a thread of its own.

close() looked for a step inside the session (``_other_thread_inside``) before it marked the session closed. A step
that began in that moment passed its own check (the session still READY), went on into the channel's send, and
close(), having seen no step, closed the pipes at once, under it: the step then wrote its action into whatever file
had taken client.pipe's descriptor number meanwhile. Now the session is marked closed before close() looks, so such
a step is either seen (close() leaves it the pipes and waits for it) or refused by its own check."""

from __future__ import annotations

import os
import threading
import time

import pytest

import renderd
import renderd.transport.fifo as fifo
from renderd.client import Session
from renderd.errors import CallOrderError

from tests.helpers.pause import line_of, pause_at, traced_thread

from .conftest import START, take_numbers

pytestmark = pytest.mark.usefixtures("no_leaks")


def test_a_step_beginning_as_close_looks_is_not_left_writing_to_closed_pipes(tmp_path):
    opened: list[int] = []
    session = renderd.launch(width=64, height=48, start_timeout=START)
    try:
        session.step("Pass")  # (client.pipe open: the next send writes at once)
        channel = session.channel
        wfd = channel.writer_fileno()
        assert wfd is not None
        # close() holds just after it looked for a step of another thread (none yet)...
        looked, go_on = threading.Event(), threading.Event()
        close_trace = pause_at(Session.close.__code__, session,
                                line_of(Session.close, "inside = self._other_thread_inside()") + 1, looked, go_on)
        # ...while a step begins; it is held just before it writes its action, if it gets that far.
        writing, write = threading.Event(), threading.Event()
        send_trace = pause_at(fifo.FifoChannel.send.__code__, channel,
                               line_of(fifo.FifoChannel.send, "wfd = self._wfd") + 1, writing, write)
        outcome: dict[str, object] = {}

        closer = traced_thread(close_trace, session.close, outcome, "closed", "close", "closer")
        stepper = traced_thread(send_trace, lambda: session.step("Pass"), outcome, "event", "error", "stepper")
        closer.start()
        try:
            assert looked.wait(START), "close() never looked for a step"
            stepper.start()
            # The step either reaches its write or is refused (the session is closed already).
            while not writing.wait(0.01) and stepper.is_alive():
                pass
            go_on.set()
            if writing.is_set():
                # close() either waits for the step (it saw it: the pipes stay open) or closes the pipes under it.
                deadline = time.monotonic() + 3.0
                while not channel.closed and time.monotonic() < deadline:
                    time.sleep(0.01)
                if channel.closed:
                    take_numbers([wfd], opened, tmp_path, b"", os.O_WRONLY)
        finally:
            go_on.set()
            write.set()
            stepper.join(START)
            closer.join(START)
            for fd in opened:
                os.close(fd)
        assert not stepper.is_alive() and not closer.is_alive()
        written = {p.name: p.read_bytes()[:60] for p in tmp_path.glob("other-*") if p.stat().st_size}
        assert not written, f"the step wrote its action into files opened after close() closed the pipes: {written}"
        assert "close" not in outcome, outcome
        assert isinstance(outcome.get("error"), CallOrderError), outcome
        assert channel.closed
    finally:
        session.close()
