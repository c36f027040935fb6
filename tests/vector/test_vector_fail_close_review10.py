"""A close() from a signal handler that lands while a failed slot's replacement is being started."""

from __future__ import annotations

import sys

import pytest

import renderd
from renderd.errors import CallOrderError
from tests.vector.conftest import player_kwargs
from tests.vector.test_vector_review10b import _close_at


def test_a_close_landing_as_a_replacement_is_started_leaves_nothing_running(no_leaks):
    # The handler's close() landed in _fail between the failed slot losing its session and its replacement
    # being submitted: the close found neither, so the failed player's session was never closed, and the
    # replacement then made a new launch pool (and wake-up descriptor) that nothing would close.
    vs = renderd.launch_many(2, replace_on_crash=True, **player_kwargs())
    trace, landed = _close_at(vs, renderd.VectorSession._fail, "executor = self._ensure_executor()")
    try:
        sys.settrace(trace)
        try:
            with pytest.raises(CallOrderError, match="closed"):
                vs.step([{"action": "RenderdFault", "fault": "exit", "code": 3}, "Pass"])
        finally:
            sys.settrace(None)
        assert landed and vs.closed
    finally:
        vs.close()
