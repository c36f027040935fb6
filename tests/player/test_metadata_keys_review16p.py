"""The reference player's metadata has the keys, types and value conventions of an AI2-THOR 5 build's, as agents
read them: every key of a build's ObjectMetadata (ai2thor's own controller reads an object's ``openable``,
``isOpen`` and a receptacle's ``receptacleObjectIds``), ``distance`` in three dimensions from the agent's position,
bounding boxes with a build's corner order, ``sceneBounds.cornerPoints``, and third-party camera rotations as a
Transform's ``eulerAngles`` (each in [0, 360))."""

from __future__ import annotations

import math

import pytest

from tests.helpers.fifo_driver import PlayerProcess

#: A build's ObjectMetadata fields (AI2-THOR 5's AgentManager.cs), in their order.
OBJECT_KEYS = [
    "name", "position", "rotation", "visible", "isInteractable", "receptacle", "toggleable", "isToggled", "breakable",
    "isBroken", "canFillWithLiquid", "isFilledWithLiquid", "fillLiquid", "dirtyable", "isDirty", "canBeUsedUp",
    "isUsedUp", "cookable", "isCooked", "temperature", "isHeatSource", "isColdSource", "sliceable", "isSliced",
    "openable", "isOpen", "openness", "pickupable", "isPickedUp", "moveable", "mass", "salientMaterials",
    "receptacleObjectIds", "distance", "objectType", "objectId", "assetId", "parentReceptacles", "controlledObjects",
    "isMoving", "axisAlignedBoundingBox", "objectOrientedBoundingBox",
]


@pytest.fixture(scope="module")
def player(tmp_path_factory):
    p = PlayerProcess(tmp_path_factory.mktemp("player"), ["-screen-width", "32", "-screen-height", "24"])
    try:
        p.start_session()
        yield p
    finally:
        p.close()


@pytest.fixture
def fresh(player):
    ev = player.step("Reset", sceneName="FloorPlan1")
    assert ev, ev.metadata["errorMessage"]
    return player, ev


def _corners(lo, hi):
    # A build's order: x, then y, then z, each axis's high value first.
    return [[x, y, z] for x in (hi[0], lo[0]) for y in (hi[1], lo[1]) for z in (hi[2], lo[2])]


def test_every_object_has_a_builds_object_keys_and_static_values(fresh):
    _, ev = fresh
    objects = ev.metadata["objects"]
    assert [o["objectType"] for o in objects] == ["Floor", "Fridge", "Cabinet", "Sofa", "Shelf"]
    for o in objects:
        assert list(o) == OBJECT_KEYS, o["objectId"]
        assert o["temperature"] == "RoomTemp" and o["fillLiquid"] is None and o["assetId"] == ""
        assert o["openable"] is False and o["isOpen"] is False and o["openness"] == 0.0
        assert o["mass"] == 0.0 and isinstance(o["mass"], float) and o["salientMaterials"] is None
        assert o["controlledObjects"] is None and o["objectOrientedBoundingBox"] is None
        # A receptacle lists what it holds (nothing moves here), anything else has null, as in a build.
        assert o["receptacleObjectIds"] == ([] if o["receptacle"] else None)
    # What ai2thor's own Controller.initialize_scene reads of every receptacle works.
    held = {oid: o["objectId"] for o in objects if o["receptacle"] for oid in o["receptacleObjectIds"]}
    is_open = {o["objectId"]: o["openable"] and o["isOpen"] for o in objects if o["receptacle"]}
    assert held == {} and set(is_open) == {objects[0]["objectId"], objects[2]["objectId"], objects[4]["objectId"]}


def test_distance_is_from_the_agents_position_in_three_dimensions(fresh):
    p, ev = fresh
    floor, fridge = ev.metadata["objects"][:2]
    # The agent stands at (0, 0.9, -2); the floor's position is (0, 0, 0), the fridge's (0, 0.9, 1).
    assert floor["distance"] == round(math.hypot(2.0, 0.9), 4) and fridge["distance"] == 3.0
    crouched = p.step("Crouch")  # the camera moves down, the agent's position does not
    assert crouched and crouched.metadata["objects"][0]["distance"] == floor["distance"]
    moved = p.step("Teleport", position={"x": 1.0, "y": 0.9, "z": -1.0})
    assert moved, moved.metadata["errorMessage"]
    assert moved.metadata["objects"][0]["distance"] == round(math.sqrt(1 + 0.81 + 1), 4)


def test_bounding_boxes_have_a_builds_corner_order_and_the_scene_bounds_its_corners(fresh):
    _, ev = fresh
    fridge = ev.metadata["objects"][1]["axisAlignedBoundingBox"]
    assert list(fridge) == ["cornerPoints", "center", "size"]
    assert fridge["cornerPoints"] == _corners((-0.5, 0.0, 0.5), (0.5, 1.8, 1.5))
    assert fridge["center"] == {"x": 0.0, "y": 0.9, "z": 1.0} and fridge["size"] == {"x": 1.0, "y": 1.8, "z": 1.0}
    bounds = ev.metadata["sceneBounds"]
    assert list(bounds) == ["cornerPoints", "center", "size"]
    assert bounds["cornerPoints"] == _corners((-3.0, 0.0, -3.0), (3.0, 2.5, 3.0))
    assert bounds["center"] == {"x": 0.0, "y": 1.25, "z": 0.0} and bounds["size"] == {"x": 6.0, "y": 2.5, "z": 6.0}


def test_third_party_camera_rotation_is_reported_as_euler_angles(fresh):
    p, _ = fresh
    added = p.step("AddThirdPartyCamera", position={"x": 0, "y": 2, "z": 0}, rotation={"x": -30, "y": -90, "z": 0})
    assert added, added.metadata["errorMessage"]
    assert added.metadata["thirdPartyCameras"][0]["rotation"] == {"x": 330.0, "y": 270.0, "z": 0.0}
    # A pitch past straight down is the same orientation turned over, as Unity's eulerAngles gives it back.
    over = p.step("UpdateThirdPartyCamera", thirdPartyCameraId=0, rotation={"x": 100, "y": 10, "z": 5})
    assert over, over.metadata["errorMessage"]
    assert over.metadata["thirdPartyCameras"][0]["rotation"] == {"x": 80.0, "y": 190.0, "z": 185.0}
    whole = p.step("UpdateThirdPartyCamera", thirdPartyCameraId=0, rotation={"x": 360, "y": 720, "z": -360})
    assert whole and whole.metadata["thirdPartyCameras"][0]["rotation"] == {"x": 0.0, "y": 0.0, "z": 0.0}
