"""reset_async()/reset() arguments are checked before anything is sent: a scene is a name, one name per listed
slot, or None; a dict (a procedural house) is neither, and its keys are not taken as scene names."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("scene", [{"FloorPlan1": 1, "FloorPlan2": 2}, ["FloorPlan1", {"rooms": []}]])
def test_a_scene_that_is_not_a_name_is_refused_before_anything_is_sent(no_leaks, launch, scene):
    vs = launch(2)
    with pytest.raises(TypeError, match="a scene is a name or None, not dict"):
        vs.reset(scene=scene)
    assert [s.sequence_id for s in vs.sessions] == [0, 0]  # nothing was sent
    out = vs.reset(scene=["FloorPlan2", None])
    assert [e.metadata["sceneName"] for e in out.observations] == ["FloorPlan2", "FloorPlan1"]
