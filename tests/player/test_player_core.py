"""The player's library parts in-process: scenes, the numpy renderer, Player.handle and the wire layout."""

from __future__ import annotations

import math

import msgpack
import numpy as np
import pytest

from renderd.player import faults
from renderd.player.core import ACTIONS, MAX_ECHOED_NAME, MAX_ERROR_MESSAGE, Player
from renderd.player.renderer import NumpyRenderer, RenderState, Renderer, make_renderer
from renderd.player.scene import AGENT_Y, CAMERA_HEIGHT, SCENES, SURFACES, scene_by_name, scene_names
from renderd.protocol import MAX_ACTION_SIZE, FieldType, encode_metadata

CAM_Y = AGENT_Y + CAMERA_HEIGHT


def part(scene_name: str, prefix: str):
    return next(p for p in SCENES[scene_name].parts() if p.object_id.startswith(prefix))


def test_scenes_have_unique_id_colors_and_free_start():
    assert len(SCENES) >= 3
    for scene in SCENES.values():
        colors = [p.id_color for p in scene.parts()]
        assert len(set(colors)) == len(colors)
        assert len(scene.parts()) == len(SURFACES) + len(scene.boxes)
        assert scene.collision(scene.start.x, scene.start.z) is None


def test_scene_names_accept_physics_suffix():
    assert scene_by_name("FloorPlan2") is scene_by_name("FloorPlan2_physics") is SCENES["FloorPlan2"]
    assert scene_by_name("FloorPlan99") is None
    assert {"FloorPlan1", "FloorPlan2", "FloorPlan3", "FloorPlan1_physics"} <= set(scene_names())


def test_collision_walls_and_boxes():
    scene = SCENES["FloorPlan1"]
    assert scene.collision(0.0, 0.4).startswith("Fridge|")  # 0.1 m from the fridge's front face
    assert scene.collision(2.95, -2.0).startswith("Wall|")
    assert scene.collision(0.0, 1.0).startswith("Fridge|")  # inside it
    assert scene.collision(0.0, -1.0) is None


def test_numpy_renderer_implements_interface_and_geometry():
    r = make_renderer("numpy")
    assert isinstance(r, Renderer) and isinstance(r, NumpyRenderer)
    scene = SCENES["FloorPlan1"]
    rgb, depth, ids = r.render(RenderState(scene, 300, 200, (0.0, CAM_Y, -2.0), 0.0, 0.0))
    assert rgb.shape == (200, 300, 3) and rgb.dtype == np.uint8
    assert depth.shape == (200, 300) and depth.dtype == np.float32
    assert ids.shape == (200, 300, 3) and ids.dtype == np.uint8
    fridge = part("FloorPlan1", "Fridge")
    assert tuple(ids[100, 150]) == fridge.id_color
    assert depth[100, 150] == pytest.approx(2.5, abs=1e-3)  # front face at z=0.5, camera at z=-2
    assert rgb[100, 150, 0] > 150 and rgb[100, 150, 1] < 60  # red
    assert tuple(ids[0, 150]) == part("FloorPlan1", "Ceiling").id_color  # top row first
    assert tuple(ids[-1, 150]) == part("FloorPlan1", "Floor").id_color
    assert (depth > 0).all() and (depth < 10).all()
    assert not rgb.flags.writeable


def test_renderer_caches_and_rejects_bad_size():
    r = NumpyRenderer()
    state = RenderState(SCENES["FloorPlan1"], 32, 32, (0.0, CAM_Y, -2.0), 10.0, 5.0)
    assert r.render(state)[0] is r.render(state)[0]
    with pytest.raises(ValueError):
        r.render(RenderState(SCENES["FloorPlan1"], 0, 32, (0.0, CAM_Y, -2.0), 0.0, 0.0))
    with pytest.raises(ValueError):
        make_renderer("vulkan")


def test_look_down_depth_is_along_the_view_axis():
    r = NumpyRenderer()
    _, depth, ids = r.render(RenderState(SCENES["FloorPlan1"], 101, 101, (0.0, CAM_Y, -2.0), 0.0, 30.0))
    assert tuple(ids[50, 50]) == part("FloorPlan1", "Fridge").id_color
    assert depth[50, 50] == pytest.approx(2.5 / math.cos(math.radians(30)), abs=1e-3)


def test_first_message_and_wire_layout():
    p = Player(width=40, height=30)
    md, images = p.first_message()
    agent = md["agents"][0]
    assert md["sequenceId"] == 0 and md["activeAgentId"] == 0 and md["thirdPartyCameras"] is None
    assert agent["lastAction"] == "" and agent["screenWidth"] == 40 and agent["screenHeight"] == 30
    assert [t for t, _ in images] == [FieldType.RGB_IMAGE]
    rgb = images[0][1]
    assert rgb.shape == (30, 40, 3) and rgb.flags.c_contiguous
    top_first, _, ids = NumpyRenderer().render(p._state(40, 30))
    assert np.array_equal(rgb[::-1], top_first)  # bottom-up on the wire
    # Every key AI2-THOR's create_event and Event read is present.
    for key in ("screenWidth", "screenHeight", "lastActionSuccess", "errorMessage", "actionReturn",
                "thirdPartyCameras", "depthFormat", "objects", "colors", "agent", "cameraNearPlane",
                "cameraFarPlane", "errorCode", "lastAction"):
        assert key in agent
    packed = encode_metadata(md)
    assert msgpack.unpackb(packed, raw=False)["agents"][0]["sceneName"] == "FloorPlan1"


def test_cloudrendering_rgba_and_ids_rgba():
    p = Player(width=20, height=10, platform="CloudRendering")
    p.handle({"action": "Initialize", "renderInstanceSegmentation": True, "renderDepthImage": True})
    _, images = p.handle({"action": "Pass"})
    kinds = {t: a for t, a in images}
    assert kinds[FieldType.RGB_IMAGE].shape == (10, 20, 4) and (kinds[FieldType.RGB_IMAGE][..., 3] == 255).all()
    assert kinds[FieldType.IDS_IMAGE].shape == (10, 20, 4)
    assert kinds[FieldType.DEPTH_IMAGE].dtype == np.dtype("<f4")


def test_every_action_is_registered():
    expected = {
        "Initialize", "Reset", "GetScenesInBuild", "MoveAhead", "MoveBack", "MoveLeft", "MoveRight",
        "RotateLeft", "RotateRight", "LookUp", "LookDown", "Teleport", "TeleportFull", "Pass", "Done",
        "ChangeResolution", "GetReachablePositions", "AddThirdPartyCamera", "UpdateThirdPartyCamera",
        faults.FAULT_ACTION,
    }
    assert expected <= set(ACTIONS)


@pytest.mark.parametrize(
    "action, code",
    [
        ({"action": "NoSuchAction"}, "InvalidAction"),
        ({"sequenceId": 3}, "InvalidAction"),
        ({"action": "RotateLeft", "degrees": "lots"}, None),  # a build's FormatException: no errorCode
        ({"action": "MoveAhead", "moveMagnitude": float("nan")}, "InvalidArgument"),
        ({"action": "ChangeResolution", "x": 0, "y": 10}, "InvalidArgument"),
        ({"action": "ChangeResolution", "x": 10}, "MissingArguments"),
        ({"action": "TeleportFull", "position": {"x": 0, "y": 0, "z": 0}}, "MissingArguments"),
        ({"action": "Teleport", "position": [1, 2]}, "InvalidArgument"),
        ({"action": "Reset", "sceneName": "Nowhere"}, "InvalidArgument"),
        ({"action": "UpdateThirdPartyCamera", "thirdPartyCameraId": 5}, None),  # a build's: no errorCode
        ({"action": "Pass", "agentId": 1}, "InvalidArgument"),
        ({"action": "RenderdFault", "fault": "explode"}, "InvalidArgument"),
        # Values that once ended the player (OverflowError, ValueError, an unpackable echo):
        ({"action": "MoveAhead", "moveMagnitude": 10**400}, "InvalidArgument"),
        ({"action": "Teleport", "position": {"x": 10**400, "y": 0, "z": 0}}, "InvalidArgument"),
        ({"action": "ChangeResolution", "x": float("inf"), "y": 10}, None),  # a build's OverflowException
        ({"action": "ChangeResolution", "x": float("nan"), "y": 10}, None),
        ({"action": "Pass", "sequenceId": 2**64}, "InvalidArgument"),
        ({"action": "Pass\ud800"}, "InvalidAction"),
    ],
)
def test_bad_actions_fail_without_raising(action, code):
    p = Player(width=16, height=16)
    md, _ = p.handle(action)
    agent = md["agents"][0]
    assert agent["lastActionSuccess"] is False
    assert agent["errorCode"] == code
    assert agent["errorMessage"]
    answer = p.answer(action)  # and the answer can be sent: its metadata packs, as msgpack and as JSON
    assert answer.packed_metadata() and answer.json_metadata()


@pytest.mark.parametrize(
    "action, message",
    [
        ({"action": "RotateLeft", "degrees": "lots"},
         "System.FormatException: Input string was not in a correct format."),
        ({"action": "ChangeResolution", "x": float("inf"), "y": 10},
         "System.OverflowException: Value was either too large or too small for an Int32."),
        ({"action": "ChangeResolution", "x": float("nan"), "y": 10},
         "System.OverflowException: Value was either too large or too small for an Int32."),
    ],
)
def test_what_net_cannot_parse_or_fit_fails_as_a_build_answers_the_exception(action, message):
    # A build's ActionDispatcher catches only an ArgumentException as a conversion (InvalidArgument): .NET's
    # FormatException and OverflowException are answered as any exception, errorCode null and their text.
    p = Player(width=16, height=16)
    md, _ = p.handle(action)
    agent = md["agents"][0]
    assert agent["lastActionSuccess"] is False and agent["errorCode"] is None
    assert agent["errorMessage"] == message
    assert (p.width, p.height, p.yaw) == (16, 16, 0.0)


def test_a_failed_initialize_changes_nothing():
    p = Player(width=16, height=16)
    grid, fov = p.grid_size, p.fov
    md, _ = p.handle({"action": "Initialize", "gridSize": 0.5, "fieldOfView": 500})
    assert md["agents"][0]["lastActionSuccess"] is False and (p.grid_size, p.fov) == (grid, fov)
    md, _ = p.handle({"action": "Initialize", "gridSize": 0.5, "fieldOfView": 60})
    assert md["agents"][0]["lastActionSuccess"] is True and (p.grid_size, p.fov) == (0.5, 60.0)


@pytest.mark.parametrize(
    "update, code",
    [
        ({"position": {"x": 1, "y": 2, "z": 1}, "rotation": "bad"}, "InvalidArgument"),
        ({"rotation": {"x": 10, "y": 20, "z": 0}, "fieldOfView": 500}, None),  # a build's: no errorCode
        ({"position": {"x": 1, "y": 2, "z": 1}, "fieldOfView": float("nan")}, "InvalidArgument"),
    ],
)
def test_a_failed_camera_update_changes_nothing(update, code):
    p = Player(width=16, height=16)
    p.handle({"action": "AddThirdPartyCamera", "position": {"x": 0, "y": 1.5, "z": 0},
              "rotation": {"x": 30, "y": 0, "z": 0}})
    before = p.handle({"action": "Pass"})[0]["agents"][0]["thirdPartyCameras"]
    md, _ = p.handle({"action": "UpdateThirdPartyCamera", "thirdPartyCameraId": 0, **update})
    assert md["agents"][0]["lastActionSuccess"] is False
    assert md["agents"][0]["errorCode"] == code
    assert md["agents"][0]["thirdPartyCameras"] == before


@pytest.mark.parametrize(
    "action",
    [
        {"action": "A" * (MAX_ACTION_SIZE - 60)},  # an unknown action: the message quotes the name
        {"action": "\u00e9" * 2_000_000},  # JSON escapes each as 6 bytes: 12 MB echoed whole
        {"action": "MoveAhead", "moveMagnitude": "x" * 1_000_000},  # the message quotes the value
        {"action": "Pass", "sequenceId": "y" * 1_000_000},
    ],
)
def test_failures_quoting_huge_values_give_small_answers(action):
    # An answer must fit every transport: over HTTP its metadata part is limited to MAX_JSON_PART_SIZE.
    p = Player(width=8, height=8)
    answer = p.answer(action)
    agent = answer.metadata()["agents"][0]
    assert agent["lastActionSuccess"] is False
    assert 0 < len(agent["errorMessage"]) <= MAX_ERROR_MESSAGE
    assert len(agent["lastAction"]) <= MAX_ECHOED_NAME
    name = action["action"]
    assert agent["lastAction"] == (name if len(name) <= MAX_ECHOED_NAME else name[: MAX_ECHOED_NAME - 3] + "...")
    assert len(answer.json_metadata()) < 64 * 1024 and len(answer.packed_metadata()) < 64 * 1024
    rejected = p.rejected_answer(action, "z" * MAX_ACTION_SIZE)
    assert len(rejected.json_metadata()) < 64 * 1024


def _camera(p: Player) -> dict:
    return p.handle({"action": "AddThirdPartyCamera", "position": {"x": 0, "y": 2, "z": 0},
                     "rotation": {"x": 30, "y": 0, "z": 0}})[0]["agents"][0]


def test_an_action_whose_largest_answer_would_not_fit_the_fifo_link_is_refused():
    # 4096 x 4096 with 8 cameras could be a 2 GB message; a client's decoder takes 1 GiB at most.
    from renderd.player.fifo_link import MAX_ANSWER_SIZE

    p = Player(width=64, height=64, renderer=FlatRenderer(), static_frame=True)
    p.limit_answer_size(MAX_ANSWER_SIZE)
    for _ in range(8):
        assert _camera(p)["lastActionSuccess"]
    md, images = p.handle({"action": "ChangeResolution", "x": 4096, "y": 4096})
    assert md["agents"][0]["lastActionSuccess"] is False and md["agents"][0]["errorCode"] == "InvalidArgument"
    assert (p.width, p.height) == (64, 64) and images[0][1].shape[:2] == (64, 64)
    p.handle({"action": "Reset", "renderImage": False})  # no cameras: 4096 x 4096 fits, and 4 cameras do
    assert p.handle({"action": "ChangeResolution", "x": 4096, "y": 4096, "renderImage": False})[0]["agents"][0][
        "lastActionSuccess"]
    for _ in range(4):
        assert _camera_no_image(p)["lastActionSuccess"]
    refused = _camera_no_image(p)
    assert refused["lastActionSuccess"] is False and "transport carries" in refused["errorMessage"]
    assert len(p.cameras) == 4
    assert p.largest_answer_size(4096, 4096, 4) <= MAX_ANSWER_SIZE < p.largest_answer_size(4096, 4096, 5)


def _camera_no_image(p: Player) -> dict:
    return p.handle({"action": "AddThirdPartyCamera", "position": {"x": 0, "y": 2, "z": 0},
                     "rotation": {"x": 30, "y": 0, "z": 0}, "renderImage": False})[0]["agents"][0]


def test_without_a_limit_the_player_refuses_no_size():
    p = Player(width=16, height=16)
    assert p.max_answer_size is None
    assert p.handle({"action": "ChangeResolution", "x": 4096, "y": 4096, "renderImage": False})[0]["agents"][0][
        "lastActionSuccess"]


def test_a_rejected_action_without_a_sequence_id_counts_on():
    p = Player(width=8, height=8)
    p.handle({"action": "Pass", "sequenceId": 7})
    assert p.rejected_answer({"action": "RenderdFault"}, "no", "InvalidArgument").sequence_id == 8


def test_sequence_id_echo_and_increment():
    p = Player(width=8, height=8)
    assert p.handle({"action": "Pass", "sequenceId": 41})[0]["sequenceId"] == 41
    assert p.handle({"action": "Pass"})[0]["sequenceId"] == 42


def test_move_until_blocked_and_visibility():
    p = Player(width=32, height=32)
    fridge = part("FloorPlan1", "Fridge").object_id
    md, _ = p.handle({"action": "Pass"})
    assert not next(o for o in md["agents"][0]["objects"] if o["objectId"] == fridge)["visible"]  # 2.5 m > 1.5 m
    moves = 0
    while True:
        md, _ = p.handle({"action": "MoveAhead"})
        agent = md["agents"][0]
        if not agent["lastActionSuccess"]:
            break
        moves += 1
        assert moves < 50
    assert moves == 9 and agent["agent"]["position"]["z"] == pytest.approx(0.25)
    name = next(o for o in agent["objects"] if o["objectId"] == fridge)["name"]
    assert agent["errorMessage"] == f"{name} is blocking Agent 0 from moving by (0.0000, 0.0000, 0.2500)."
    assert next(o for o in agent["objects"] if o["objectId"] == fridge)["visible"]


def test_metadata_objects_size():
    p = Player(width=8, height=8, metadata_objects=130)
    md, _ = p.first_message()
    assert len(md["agents"][0]["objects"]) == 1 + len(SCENES["FloorPlan1"].boxes) + 130
    assert 100_000 < len(encode_metadata(md)) < 160_000


def test_fault_parsing():
    assert faults.parse_fault({"action": "Pass"}) is None
    f = faults.parse_fault({"action": "RenderdFault", "fault": "exit", "code": 9, "when": "after"})
    assert (f.kind, f.code, f.when, f.is_stream_fault) == ("exit", 9, "after", False)
    assert faults.parse_fault({"action": "RenderdFault", "fault": "close"}).is_stream_fault
    for bad in ({"fault": "exit", "code": 300}, {"fault": "sleep", "seconds": -1}, {"fault": "garbage", "when": "after"},
                {"fault": "hang", "when": "later"}):
        with pytest.raises(faults.FaultError):
            faults.parse_fault({"action": "RenderdFault", **bad})


class FlatRenderer:
    """A minimal renderer honouring the interface: top-row-first arrays, read-only is fine."""

    name = "flat"

    def __init__(self):
        self.states = []

    def render(self, state):
        self.states.append(state)
        h, w = state.height, state.width
        rgb = np.zeros((h, w, 3), np.uint8)
        rgb[0] = 200  # top row bright
        depth = np.full((h, w), 1.5, np.float32)
        ids = np.zeros((h, w, 3), np.uint8)
        return rgb, depth, ids


def test_player_uses_any_renderer_with_the_interface():
    r = FlatRenderer()
    assert isinstance(r, Renderer)
    p = Player(width=6, height=4, renderer=r)
    _, images = p.handle({"action": "Pass", "renderDepthImage": True})
    rgb = dict(images)[FieldType.RGB_IMAGE]
    assert (rgb[-1] == 200).all() and (rgb[:-1] == 0).all()  # the top row goes last on the wire
    assert (dict(images)[FieldType.DEPTH_IMAGE] == 1.5).all()
    state = r.states[-1]
    assert (state.width, state.height, state.fov, state.pitch) == (6, 4, 90.0, 0.0)
    assert state.position == (0.0, CAM_Y, -2.0)


@pytest.mark.parametrize("width,height", [(1, 4096), (4096, 1), (300, 300), (320, 200), (200, 320)])
def test_the_visibility_render_is_small_whatever_the_frame_shape(width, height):
    # Visibility is judged on a small render of the frame's shape; a tall frame made it 64 pixels wide and
    # up to 262,144 high (seconds per new view).
    player = Player(width=width, height=height, platform="headless")
    sizes = []
    render = player._probe.render

    def recording(state):
        sizes.append((state.width, state.height))
        return render(state)

    player._probe.render = recording
    player.answer({"action": "MoveAhead"})
    small = [(w, h) for w, h in sizes if (w, h) != (width, height)]  # (the frame itself may come from it too)
    assert small and all(max(w, h) == 64 and min(w, h) >= 1 for w, h in small), sizes
