"""A close() from a signal handler that lands while a failed slot's replacement is being started."""

from __future__ import annotations

import renderd
from tests.vector.conftest import player_kwargs, step_closed_at


def test_a_close_landing_as_a_replacement_is_started_leaves_nothing_running(no_leaks):
    # The handler's close() landed in _fail between the failed slot losing its session and its replacement
    # being submitted: the close found neither, so the failed player's session was never closed, and the
    # replacement then made a new launch pool (and wake-up descriptor) that nothing would close.
    vs = renderd.launch_many(2, replace_on_crash=True, **player_kwargs())
    try:
        step_closed_at(vs, renderd.VectorSession._fail, "executor = self._ensure_executor()",
                       actions=[{"action": "RenderdFault", "fault": "exit", "code": 3}, "Pass"], match="closed")
    finally:
        vs.close()
