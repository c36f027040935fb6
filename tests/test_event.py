"""Events from decoded messages: zero-copy views, orientation, sizes, patches, several agents."""

from __future__ import annotations

import numpy as np
import pytest

from renderd.errors import ProtocolError
from renderd.event import FrameAssembler
from renderd.protocol import Decoder, FieldType, encode_message, encode_metadata
from tests.helpers.event_review14e import H, W, agent, message


def bottom_up(img: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(img[::-1])


def rgb_image(channels=3):
    img = np.zeros((H, W, channels), np.uint8)
    img[0, :, 0] = 255  # top row red
    img[-1, :, 2] = 255  # bottom row blue
    if channels == 4:
        img[..., 3] = 255
    return img


def test_frame_is_a_top_row_first_view_of_the_received_bytes():
    img = rgb_image()
    md = {"agents": [agent()], "sequenceId": 3, "activeAgentId": 0}
    m = message([(FieldType.METADATA, encode_metadata(md)), (FieldType.RGB_IMAGE, bottom_up(img).reshape(-1))])
    ev = FrameAssembler().event(m)
    assert ev.frame.shape == (H, W, 3) and ev.frame.dtype == np.uint8
    assert (ev.frame == img).all()
    assert ev.frame[0, 0, 0] == 255 and ev.frame[-1, 0, 2] == 255
    assert np.shares_memory(ev.frame, np.frombuffer(m.fields[1][1], dtype=np.uint8))
    assert ev.sequence_id == 3 and bool(ev) and ev.screen_width == W and ev.screen_height == H
    assert ev.events == [ev]


def test_rgba_frames_drop_alpha_without_copying():
    img = rgb_image(4)
    md = {"agents": [agent()], "sequenceId": 0}
    m = message([(FieldType.METADATA, encode_metadata(md)), (FieldType.RGB_IMAGE, bottom_up(img).reshape(-1))])
    ev = FrameAssembler().event(m)
    assert ev.frame.shape == (H, W, 3)
    assert (ev.frame == img[..., :3]).all()


def test_depth_is_float32_metres():
    depth = np.linspace(0.5, 9.5, W * H, dtype=np.float32).reshape(H, W)
    md = {"agents": [agent()], "sequenceId": 0}
    m = message([(FieldType.METADATA, encode_metadata(md)), (FieldType.DEPTH_IMAGE, bottom_up(depth).view(np.uint8))])
    ev = FrameAssembler().event(m)
    assert ev.depth_frame.dtype == np.float32 and ev.depth_frame.shape == (H, W)
    assert np.array_equal(ev.depth_frame, depth)
    md = {"agents": [agent(depthFormat="Millimeters")], "sequenceId": 0}
    m = message([(FieldType.METADATA, encode_metadata(md)), (FieldType.DEPTH_IMAGE, bottom_up(depth * 1000).view(np.uint8))])
    assert np.allclose(FrameAssembler().event(m).depth_frame, depth)


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"screenWidth": float("inf")}, "screenWidth/screenHeight"),
        ({"screenHeight": float("nan")}, "screenWidth/screenHeight"),
        ({"screenWidth": [5]}, "screenWidth/screenHeight"),
        ({"depthFormat": "Normalized", "cameraNearPlane": "x"}, "cameraNearPlane is 'x'"),
        ({"depthFormat": "Normalized", "cameraFarPlane": float("inf")}, "cameraFarPlane is inf"),
        ({"depthFormat": "Normalized", "cameraFarPlane": None}, "cameraFarPlane is None"),
        ({"depthFormat": ["Meters"]}, r"unknown depthFormat \['Meters'\]"),
        ({"depthFormat": {"unit": "m"}}, "unknown depthFormat"),
    ],
)
def test_malformed_metadata_values_are_protocol_errors(fields, match):
    # Values a scan passes through but the event cannot use: a ProtocolError (naming the value, and the
    # depth field's offset where there is one), never a bare OverflowError, ValueError or TypeError.
    md = {"agents": [agent(**fields)], "sequenceId": 0}
    depth = np.zeros(W * H, dtype=np.float32).view(np.uint8)
    m = message([(FieldType.METADATA, encode_metadata(md)), (FieldType.DEPTH_IMAGE, depth)])
    with pytest.raises(ProtocolError, match=match) as info:
        FrameAssembler().event(m)
    if "depthFormat" in fields:
        assert info.value.offset == m.offsets[1] and info.value.field_type == FieldType.DEPTH_IMAGE


def test_normalized_depth_scales_by_the_clip_range():
    depth = np.linspace(0.0, 1.0, W * H, dtype=np.float32).reshape(H, W)
    md = {"agents": [agent(depthFormat="Normalized", cameraNearPlane=0.5, cameraFarPlane="10.5")], "sequenceId": 0}
    m = message([(FieldType.METADATA, encode_metadata(md)), (FieldType.DEPTH_IMAGE, bottom_up(depth).view(np.uint8))])
    assert np.allclose(FrameAssembler().event(m).depth_frame, depth * 10.0)


def test_wrong_image_size_names_both_sizes():
    md = {"agents": [agent()], "sequenceId": 0}
    m = message([(FieldType.METADATA, encode_metadata(md)), (FieldType.RGB_IMAGE, b"x" * 7)])
    with pytest.raises(ProtocolError) as info:
        FrameAssembler().event(m)
    text = str(info.value)
    assert "7 bytes" in text and f"{W} x {H}" in text and str(W * H * 3) in text
    assert info.value.offset == m.offsets[1]


def test_message_without_metadata():
    m = message([(FieldType.RGB_IMAGE, b"x" * (W * H * 3))])
    with pytest.raises(ProtocolError, match="no METADATA"):
        FrameAssembler().event(m)


def test_metadata_without_agents():
    m = message([(FieldType.METADATA, encode_metadata({"sequenceId": 0}))])
    with pytest.raises(ProtocolError, match="no 'agents' list"):
        FrameAssembler().event(m)


def test_patch_merges_as_ai2thor_does():
    a0, a1 = agent(x=0, lastAction="A"), agent(x=1, lastAction="B")
    md = {"agents": [a0, a1], "sequenceId": 1, "activeAgentId": 0, "thirdPartyCameras": []}
    img0, img1 = rgb_image(), rgb_image()[::-1]
    fa = FrameAssembler()
    first = fa.event(
        message(
            [
                (FieldType.METADATA, encode_metadata(md)),
                (FieldType.RGB_IMAGE, bottom_up(img0).reshape(-1)),
                (FieldType.RGB_IMAGE, bottom_up(img1).reshape(-1)),
            ]
        )
    )
    assert len(first.events) == 2 and first.metadata["x"] == 0
    patch = {"agentId": 1, "lastAction": "RotateLeft", "x": 11}
    ev = fa.event(message([(FieldType.METADATA_PATCH, encode_metadata(patch))]), sequence_id=2)
    # the active agent is the patched one; the other agents are shallow copies of the previous ones
    assert ev.metadata["lastAction"] == "RotateLeft" and ev.metadata["x"] == 11 and ev.metadata["agentId"] == 1
    assert ev.events[0].metadata == a0 and ev.events[0].metadata is not first.events[0].metadata
    assert ev.sequence_id == 2
    # the previous frame's images stay valid
    assert (ev.frame == img1).all() and (ev.events[0].frame == img0).all()
    assert first.events[1].metadata["x"] == 1  # the earlier event was not mutated


def test_patch_before_metadata_and_bad_agent_id():
    fa = FrameAssembler()
    with pytest.raises(ProtocolError, match="before any full METADATA"):
        fa.event(message([(FieldType.METADATA_PATCH, encode_metadata({"agentId": 0}))]))
    fa.event(message([(FieldType.METADATA, encode_metadata({"agents": [agent()], "sequenceId": 0}))]))
    with pytest.raises(ProtocolError, match="agentId 3"):
        fa.event(message([(FieldType.METADATA_PATCH, encode_metadata({"agentId": 3}))]))


def test_third_party_cameras_and_segmentation():
    md = {
        "agents": [agent(thirdPartyCameras=[{"id": 0}], colors=[{"name": "Box|1", "color": [1, 2, 3]}])],
        "sequenceId": 0,
    }
    tp = rgb_image()
    ids = np.zeros((H, W, 4), np.uint8)
    ids[..., :3] = [1, 2, 3]
    m = message(
        [
            (FieldType.METADATA, encode_metadata(md)),
            (FieldType.THIRD_PARTY_IMAGE, bottom_up(tp).reshape(-1)),
            (FieldType.IDS_IMAGE, ids.reshape(-1)),
        ]
    )
    ev = FrameAssembler().event(m)
    assert len(ev.third_party_camera_frames) == 1 and (ev.third_party_camera_frames[0] == tp).all()
    assert ev.instance_segmentation_frame.shape == (H, W, 3)
    assert ev.color_to_object_id[(1, 2, 3)] == "Box|1"
    assert ev.frame is None and ev.depth_frame is None


def test_changes_to_an_events_metadata_reach_no_later_event():
    # A user may edit event.metadata (their copy); a METADATA_PATCH that follows is merged into what the
    # player sent, not into what the user made of it, and the same holds from one patch to the next.
    a = agent(objects=[{"objectId": "Mug|1"}], agent={"position": {"x": 0.0}})
    md = {"agents": [a], "sequenceId": 1, "activeAgentId": 0}
    fa = FrameAssembler()
    img = np.zeros(W * H * 3, np.uint8)
    ev1 = fa.event(message([(FieldType.METADATA, encode_metadata(md)), (FieldType.RGB_IMAGE, img)]), 1)
    ev1.metadata["lastAction"] = "Edited"
    ev1.metadata["objects"].append({"objectId": "Junk"})
    ev1.metadata["agent"]["position"]["x"] = 99.0
    ev2 = fa.event(message([(FieldType.METADATA_PATCH, encode_metadata({"agentId": 0, "lastActionSuccess": False}))]), 2)
    assert ev2.metadata["lastAction"] == "Pass" and not ev2.metadata["lastActionSuccess"]
    assert ev2.metadata["objects"] == [{"objectId": "Mug|1"}] and ev2.metadata["agent"]["position"]["x"] == 0.0
    ev2.metadata["errorMessage"] = "edited"
    ev2.metadata["objects"].clear()
    ev3 = fa.event(message([(FieldType.METADATA_PATCH, encode_metadata({"agentId": 0, "lastAction": "MoveAhead"}))]), 3)
    assert ev3.metadata["errorMessage"] == "" and ev3.metadata["objects"] == [{"objectId": "Mug|1"}]
    assert ev3.last_action == "MoveAhead" and not ev3
    assert ev1.metadata["lastAction"] == "Edited" and len(ev1.metadata["objects"]) == 2  # each keeps its own
    assert ev2.metadata["errorMessage"] == "edited" and ev2.metadata["objects"] == []


def test_a_patched_events_metadata_is_an_exact_copy_for_every_agent():
    # After a METADATA_PATCH each event gets its own copy of the merged map: equal to it in every value and
    # type msgpack decodes (bytes stay bytes, int keys stay ints, extension types stay), several agents each
    # keeping theirs, and nothing a user changes reaching the other agent's event or a later one.
    import msgpack

    odd = {"blob": b"\x00\xff", 7: [1.5, None, True, -3], "ext": msgpack.ExtType(5, b"xy"), "text": "é"}
    md = {"agents": [agent(odd=odd, objects=[{"objectId": "A"}]), agent(odd=odd, objects=[{"objectId": "B"}])],
          "sequenceId": 1, "activeAgentId": 0}
    fa = FrameAssembler()
    fa.event(message([(FieldType.METADATA, msgpack.packb(md))]), 1)
    ev = fa.event(message([(FieldType.METADATA_PATCH, encode_metadata({"agentId": 1, "lastAction": "Jump"}))]), 2)
    a0, a1 = ev.events
    assert ev is a1 and a1.metadata["lastAction"] == "Jump" and a0.metadata["lastAction"] == "Pass"
    for got in (a0.metadata["odd"], a1.metadata["odd"]):
        assert got == odd and type(got["blob"]) is bytes and list(got) == ["blob", 7, "ext", "text"]
    a0.metadata["objects"].append("junk")
    a1.metadata["odd"][7].append("junk")
    assert a1.metadata["objects"] == [{"objectId": "B"}] and a0.metadata["odd"] == odd
    later = fa.event(message([(FieldType.METADATA_PATCH, encode_metadata({"agentId": 0, "lastAction": "Sit"}))]), 3)
    b0, b1 = later.events
    assert b0.metadata["objects"] == [{"objectId": "A"}] and b1.metadata["odd"] == odd
    assert b0.metadata["lastAction"] == "Sit" and b1.metadata["lastAction"] == "Jump"


def test_metadata_set_on_the_assembler_by_hand_is_copied_as_it_is():
    # Metadata given to FrameAssembler.metadata by hand may hold what msgpack does not decode to: a tuple
    # (as a value or as a key). A patched event's copy keeps it as it is; it must not become a list, nor
    # make reading event.metadata fail as if the player had sent malformed msgpack.
    fa = FrameAssembler()
    fa.metadata = {"agents": [agent(pose=(1, 2), grid={(0, 1): "wall"})], "sequenceId": 1, "activeAgentId": 0}
    ev = fa.event(message([(FieldType.METADATA_PATCH, encode_metadata({"agentId": 0, "lastAction": "Jump"}))]), 2)
    assert ev.metadata["lastAction"] == "Jump"
    assert ev.metadata["pose"] == (1, 2) and ev.metadata["grid"] == {(0, 1): "wall"}


def thor_events(raw: bytes, sequence_ids):
    """AI2-THOR's own events for ``raw`` (one or more whole messages), from its FifoServer and create_event."""
    import io

    fifo_server = pytest.importorskip("ai2thor.fifo_server")
    server = fifo_server.FifoServer(width=W, height=H, timeout=None)
    try:
        server.server_pipe = io.BytesIO(raw)
        events = []
        for seq in sequence_ids:
            server.sequence_id = seq
            events.append(server.receive())
        return events
    finally:
        server.tmp_dir.cleanup()


def raw_message(fields) -> bytes:
    return b"".join(bytes(memoryview(b).cast("B")) for b in encode_message(fields))


@pytest.mark.parametrize("depth_format", [None, "Normalized", "Meters", "Millimeters"])
def test_legacy_three_byte_depth_is_scaled_as_ai2thor_scales_it(depth_format):
    # A 3-byte depth pixel is a/256 + b/256^2 + c/256^3 of the format's full scale (AI2-THOR divides the
    # sum by 256); builds old enough to send it did not send depthFormat, and their depth is Normalized.
    fields = {} if depth_format is None else {"depthFormat": depth_format}
    a = agent(**fields)
    if depth_format is None:
        del a["depthFormat"]
    md = {"agents": [a], "sequenceId": 0}
    rng = np.random.default_rng(1)
    depth = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
    raw = raw_message([(FieldType.METADATA, encode_metadata(md)), (FieldType.DEPTH_IMAGE, depth.reshape(-1))])
    d = Decoder()
    d.receive_data(raw)
    ours = FrameAssembler().event(d.next_message()).depth_frame
    (theirs,) = thor_events(raw, [0])
    assert ours.dtype == theirs.depth_frame.dtype == np.float32 and ours.shape == (H, W)
    np.testing.assert_allclose(ours, theirs.depth_frame, rtol=1e-6)
    assert 0 <= ours.max() < {None: 19.9, "Normalized": 19.9, "Meters": 1, "Millimeters": 0.001}[depth_format]


@pytest.mark.parametrize("channels", [4, 3])
def test_masks_and_detections_are_ai2thors(channels):
    # Segmentation as AI2-THOR's Event reads it from the same bytes: instances are the colours whose name
    # holds '|', types gather every colour of the type (and a colour named by type alone), "background" is
    # the colours `colors` does not list, and a 4-byte pixel matches only with alpha 255.
    colors = [
        {"name": "Mug|1", "color": [10, 0, 0]},
        {"name": "Mug|2", "color": [20, 0, 0]},
        {"name": "Table|1", "color": [0, 30, 0]},
        {"name": "Floor", "color": [0, 0, 40]},
        {"name": "Lamp|9", "color": [1, 1, 1]},  # not in view
    ]
    ids = np.zeros((H, W, channels), np.uint8)
    if channels == 4:
        ids[..., 3] = 255
    ids[0, 0, :3] = [10, 0, 0]
    ids[1:3, 1:4, :3] = [20, 0, 0]
    ids[3, :, :3] = [0, 30, 0]
    ids[2, 4, :3] = [0, 0, 40]
    ids[0, 4, :3] = [9, 9, 9]  # unlisted: background (so is black)
    if channels == 4:
        ids[1, 0] = [10, 0, 0, 7]  # Mug|1's colour, but not alpha 255
    md = {"agents": [agent(colors=colors, objects=[])], "sequenceId": 0}
    raw = raw_message([(FieldType.METADATA, encode_metadata(md)), (FieldType.IDS_IMAGE, bottom_up(ids).reshape(-1))])
    d = Decoder()
    d.receive_data(raw)
    ours = FrameAssembler().event(d.next_message())
    (theirs,) = thor_events(raw, [0])
    assert np.array_equal(ours.instance_segmentation_frame, theirs.instance_segmentation_frame)
    assert sorted(ours.instance_masks) == sorted(theirs.instance_masks) == ["Mug|1", "Mug|2", "Table|1"]
    assert sorted(ours.class_masks) == sorted(theirs.class_masks) == ["Floor", "Mug", "Table"]
    for key in ["Mug|1", "Mug|2", "Table|1", "Lamp|9", "Floor", "Mug", "nothing", "background"]:
        for m_ours, m_theirs in ((ours.instance_masks, theirs.instance_masks), (ours.class_masks, theirs.class_masks)):
            assert (key in m_ours) == (key in m_theirs), key
            if key in m_theirs:
                assert m_ours[key].dtype == bool and np.array_equal(m_ours[key], m_theirs[key]), key
            else:
                with pytest.raises(KeyError):
                    m_ours[key]
    assert ours.class_masks["background"][0, 4]
    # Both list the masks in the order they were first made (here: by the loops above).
    assert list(ours.class_masks) == list(theirs.class_masks) and list(ours.instance_masks) == list(theirs.instance_masks)
    assert dict(ours.instance_detections2D.items()) == dict(theirs.instance_detections2D.items())
    assert ours.instance_detections2D["Mug|2"] == (1, 1, 3, 2)
    assert dict(ours.class_detections2D.items()) == dict(theirs.class_detections2D.items())
    assert ours.class_detections2D["Mug"] == theirs.class_detections2D["Mug"] == ((0, 0, 0, 0), (1, 1, 3, 2))
    assert ours.color_to_object_id == theirs.color_to_object_id
    assert ours.color_to_object_id is ours.color_to_object_id  # built once


def test_an_event_without_segmentation_has_ai2thors_empty_masks():
    md = {"agents": [agent(colors=[{"name": "Mug|1", "color": [1, 2, 3]}])], "sequenceId": 0}
    raw = raw_message([(FieldType.METADATA, encode_metadata(md)), (FieldType.RGB_IMAGE, bottom_up(rgb_image()).reshape(-1))])
    d = Decoder()
    d.receive_data(raw)
    ours = FrameAssembler().event(d.next_message())
    (theirs,) = thor_events(raw, [0])
    for attr in ("instance_masks", "class_masks", "instance_detections2D", "class_detections2D",
                 "third_party_instance_masks", "third_party_class_masks", "third_party_flows_frames"):
        assert getattr(ours, attr) == getattr(theirs, attr), attr
    assert np.array_equal(ours.cv2img, theirs.cv2img) and ours.cv2img[0, 0, 2] == 255


def test_several_agents_and_patches_give_ai2thors_events():
    # Two agents, each with its images, one third-party camera (its frames in every agent's event), then a
    # METADATA_PATCH for agent 1: the same events as AI2-THOR's MultiAgentEvent lists.
    colors = [{"name": "Mug|1", "color": [10, 0, 0]}]
    cams = [{"id": 0}]
    md = {"agents": [agent(x=0, colors=colors, thirdPartyCameras=cams), agent(x=1, colors=colors, thirdPartyCameras=cams)],
          "sequenceId": 4, "activeAgentId": 1, "thirdPartyCameras": cams}
    rng = np.random.default_rng(2)
    rgb = [rng.integers(0, 256, (H, W, 3), dtype=np.uint8) for _ in range(3)]
    depth = [rng.random((H, W), dtype=np.float32) for _ in range(3)]
    ids = [np.zeros((H, W, 4), np.uint8) for _ in range(3)]
    for i, a in enumerate(ids):
        a[..., 3] = 255
        a[i, :, 0] = 10
    fields = [(FieldType.METADATA, encode_metadata(md)), (FieldType.THIRD_PARTY_IMAGE, rgb[2].reshape(-1)),
              (FieldType.THIRD_PARTY_DEPTH, depth[2].view(np.uint8).reshape(-1)),
              (FieldType.THIRD_PARTY_IMAGE_IDS, ids[2].reshape(-1))]
    for i in range(2):
        fields += [(FieldType.RGB_IMAGE, rgb[i].reshape(-1)), (FieldType.DEPTH_IMAGE, depth[i].view(np.uint8).reshape(-1)),
                   (FieldType.IDS_IMAGE, ids[i].reshape(-1))]
    patch = {"agentId": 0, "lastAction": "Jump", "lastActionSuccess": False}
    raw = raw_message(fields) + raw_message([(FieldType.METADATA_PATCH, encode_metadata(patch))])
    d = Decoder()
    d.receive_data(raw)
    fa = FrameAssembler()
    ours = [fa.event(d.next_message()), fa.event(d.next_message(), sequence_id=5)]
    theirs = thor_events(raw, [4, 5])
    for o, t in zip(ours, theirs):
        assert o.metadata == t.metadata and bool(o) == bool(t) and len(o.events) == len(t.events) == 2
        for oe, te in zip(o.events, t.events):
            assert oe.metadata == te.metadata and bool(oe) == bool(te)
            for attr in ("frame", "depth_frame", "instance_segmentation_frame"):
                assert np.array_equal(getattr(oe, attr), getattr(te, attr)), attr
            for attr in ("third_party_camera_frames", "third_party_depth_frames",
                         "third_party_instance_segmentation_frames"):
                assert len(getattr(oe, attr)) == len(getattr(te, attr)) == 1, attr
                assert np.array_equal(getattr(oe, attr)[0], getattr(te, attr)[0]), attr
            assert sorted(oe.instance_masks) == sorted(te.instance_masks) == ["Mug|1"]
            assert np.array_equal(oe.instance_masks["Mug|1"], te.instance_masks["Mug|1"])
            assert np.array_equal(oe.third_party_instance_masks[0]["Mug|1"], te.third_party_instance_masks[0]["Mug|1"])
    assert ours[0].metadata["x"] == 1 and ours[1].metadata["x"] == 0 and not ours[1]


def test_deprecated_metadata_keys_are_answered_as_ai2thor_answers_them():
    msgs = [
        {"agents": [agent(lastAction="GetReachablePositions", actionReturn=[{"x": 1.0}], heldObjectPose={"p": 1})],
         "sequenceId": 0},
        {"agents": [agent(lastAction="MoveAhead", actionReturn=None)], "sequenceId": 1},
    ]
    raw = b"".join(raw_message([(FieldType.METADATA, encode_metadata(md))]) for md in msgs)
    d = Decoder()
    d.receive_data(raw)
    fa = FrameAssembler()
    ours = [fa.event(d.next_message()), fa.event(d.next_message())]
    theirs = thor_events(raw, [0, 1])
    with pytest.warns(UserWarning, match="reachablePositions"):
        assert ours[0].metadata["reachablePositions"] == theirs[0].metadata["reachablePositions"] == [{"x": 1.0}]
    with pytest.warns(UserWarning, match="heldObjectPose"):
        assert ours[0].metadata["hand"] == theirs[0].metadata["hand"] == {"p": 1}
    with pytest.raises(IndexError, match="GetReachablePositions"):
        ours[1].metadata["reachablePositions"]
    with pytest.raises(KeyError, match="GetReachablePositions"):
        ours[1].metadata["reachablePositions"]
    with pytest.raises(IndexError):
        theirs[1].metadata["reachablePositions"]
    with pytest.raises(KeyError, match="nothing"):
        ours[1].metadata["nothing"]
    assert "reachablePositions" not in ours[0].metadata and ours[0].metadata.get("hand") is None
    assert ours[1].metadata == msgs[1]["agents"][0] and isinstance(ours[1].metadata, dict)
