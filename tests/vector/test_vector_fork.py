"""A VectorSession inherited over fork (a data loader worker, a helper process) belongs to the parent: the
child's copy refuses to step, replaces no slot (it would launch players of its own behind the caller's
back), and its close() only marks it closed, even with a replacement on its way in the parent's thread."""

from __future__ import annotations

import threading

import pytest

import renderd
from renderd.vector import SlotState
from tests.helpers.fork_review14c import in_child
from tests.vector.conftest import player_kwargs


def test_close_in_a_child_does_not_wait_for_the_parents_replacement(no_leaks):
    release = threading.Event()

    def factory(slot):
        release.wait(30)
        return renderd.launch(**player_kwargs())

    vs = renderd.VectorSession([renderd.launch(**player_kwargs()) for _ in range(2)], factory=factory,
                               replace_on_crash=True)
    try:
        out = vs.step(["Pass", {"action": "RenderdFault", "fault": "segfault"}])
        assert out.infos[1]["replaced"] and vs.slot_states[1] is SlotState.REPLACING
        assert in_child(vs.close) == 0, "the child's close() waited for the parent's replacement"
        assert vs.sessions[0].process.poll() is None, "the child stopped the parent's player"
        release.set()
        out = vs.step(["Pass", "Pass"], wait_resets=True)
        assert out.observations[0] is not None and out.observations[1] is not None
    finally:
        release.set()
        vs.close()


def test_a_child_cannot_step_the_parents_players_nor_replace_them(no_leaks):
    vs = renderd.launch_many(2, replace_on_crash=True, **player_kwargs())
    try:
        vs.step(["Pass", "Pass"])
        pids = vs.pids

        def child_steps() -> None:
            with pytest.raises(renderd.CallOrderError, match="inherited over fork from process"):
                vs.step(["Pass", "Pass"])
            assert vs.pids == pids  # no player of its own was launched for a slot
            vs.close()

        assert in_child(child_steps) == 0
        assert all(s.process.poll() is None for s in vs.sessions)
        out = vs.step(["Pass", "Pass"])
        assert [e.sequence_id for e in out.observations] == [2, 2]
    finally:
        vs.close()
