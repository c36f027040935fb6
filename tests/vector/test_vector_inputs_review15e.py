"""What a VectorSession says for actions, slots and scenes of the wrong shape: a TypeError saying what it takes and
what it got, nothing sent, the vector session still usable (it was "'int' object is not iterable", a set's actions
sent in the set's order, and the bytes of a name taken as numbers)."""

from __future__ import annotations

import numpy as np
import pytest


N = 2


def _still_usable(vs, before):
    # Nothing was sent: every slot's last event is the one before the refused call, and the next step works.
    assert [s.last_event.sequence_id for s in vs.sessions] == before
    assert not vs.pending and vs.error is None
    assert all(e is not None and e.metadata["lastActionSuccess"] for e in vs.step(["Pass"] * N).observations)


@pytest.mark.parametrize(("actions", "said"), [
    (3, r"step\(\) takes one action per slot \(a list of 2\), not int; nothing was sent"),
    (None, r"step\(\) takes one action per slot \(a list of 2\), not NoneType; nothing was sent"),
    (np.int64(2), r"step\(\) takes one action per slot \(a list of 2\), not int64; nothing was sent"),
    (np.array("Pass"), r"step\(\) takes one action per slot \(a list of 2\), not ndarray; nothing was sent"),
    ({"Pass", "MoveAhead"}, r"step\(\) takes one action per slot \(a list of 2\), not a set: a set has no order"),
    (b"ab", r"step\(\) takes one action per slot \(a list\), not a single action"),
])
def test_step_refuses_actions_that_are_no_list_saying_so(no_leaks, launch, actions, said):
    vs = launch(N)
    before = [s.last_event.sequence_id for s in vs.sessions]
    with pytest.raises(TypeError, match=said):
        vs.step(actions)
    _still_usable(vs, before)


@pytest.mark.parametrize(("kwargs", "said"), [
    ({"scene": 3}, r"reset\(\): scene is a name, a list of them \(one per slot\), or None, not int; nothing was sent"),
    ({"scene": b"FloorPlan2"}, r"reset\(\): a scene is a name or None, not bytes"),
    ({"slots": 1.5}, r"slots is a slot index or a list of them \(0\.\.1\), or None, not float; nothing was sent"),
])
def test_reset_refuses_scenes_and_slots_of_the_wrong_type_saying_so(no_leaks, launch, kwargs, said):
    vs = launch(N)
    before = [s.last_event.sequence_id for s in vs.sessions]
    with pytest.raises(TypeError, match=said):
        vs.reset(**kwargs)
    _still_usable(vs, before)


def test_a_set_of_slots_is_still_taken(no_leaks, launch):
    # (Guard: resetting a set of slots, with one scene for all, worked before and still does.)
    vs = launch(N)
    out = vs.reset({0, 1}, "FloorPlan2")
    assert all(e.metadata["sceneName"] == "FloorPlan2" for e in out.observations)
