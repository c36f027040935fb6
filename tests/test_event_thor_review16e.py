"""Guards for rows of docs/client.md's "Where it differs from AI2-THOR's Event": the same bytes read by renderd
and by AI2-THOR's own FifoServer, and each difference the table names is what each of them does."""

from __future__ import annotations

import numpy as np
import pytest

from renderd.event import FrameAssembler
from renderd.protocol import Decoder, FieldType, encode_message, encode_metadata
from tests.helpers.thor_review15d import ThorReader


def _both(width, height, agent, fields, top_cameras=None):
    """renderd's event and AI2-THOR's for one message of ``fields`` after the metadata."""
    fifo_server = pytest.importorskip("ai2thor.fifo_server")
    a = {"screenWidth": width, "screenHeight": height, "lastAction": "Pass", "lastActionSuccess": True,
         "errorMessage": "", "depthFormat": "Meters", **agent}
    md = {"agents": [a], "sequenceId": 0, "activeAgentId": 0, "thirdPartyCameras": top_cameras}
    raw = b"".join(bytes(memoryview(b).cast("B"))
                   for b in encode_message([(FieldType.METADATA, encode_metadata(md)), *fields]))
    decoder = Decoder()
    decoder.receive_data(raw)
    ours = FrameAssembler().event(decoder.next_message())
    thor = ThorReader(fifo_server, width, height)
    try:
        theirs = thor.receive(raw, 0)
    finally:
        thor.close()
    return ours, theirs


@pytest.mark.parametrize("width, height", [(5, 1), (1, 4)])
def test_depth_and_masks_of_a_one_pixel_high_or_wide_image_keep_their_two_dimensions(width, height):
    # AI2-THOR squeezes float32 depth and the masks to one dimension (its detections then fail); renderd's
    # keep (H, W), with the same values.
    n = width * height
    depth = np.arange(1, n + 1, dtype=np.float32)
    ids = np.zeros((n, 4), np.uint8)
    ids[:, 3] = 255
    ids[0, 0] = 10
    fields = [(FieldType.DEPTH_IMAGE, depth.view(np.uint8)), (FieldType.IDS_IMAGE, ids.reshape(-1)),
              (FieldType.THIRD_PARTY_DEPTH, depth.view(np.uint8))]
    ours, theirs = _both(width, height, {"colors": [{"name": "Mug|1", "color": [10, 0, 0]}],
                                         "thirdPartyCameras": [{"id": 0}]}, fields)
    for o, t in ((ours.depth_frame, theirs.depth_frame), (ours.third_party_depth_frames[0], theirs.third_party_depth_frames[0]),
                 (ours.instance_masks["Mug|1"], theirs.instance_masks["Mug|1"]),
                 (ours.class_masks["Mug"], theirs.class_masks["Mug"])):
        assert t.shape == (n,) and o.shape == (height, width) and o.dtype == t.dtype
        assert np.array_equal(o.reshape(-1), t)
    assert ours.instance_detections2D["Mug|1"] == (0, height - 1, 0, height - 1)
    assert ours.class_detections2D["Mug"] == ((0, height - 1, 0, height - 1),)
    with pytest.raises(np.exceptions.AxisError):
        theirs.instance_detections2D["Mug|1"]
    with pytest.raises(np.exceptions.AxisError):
        theirs.class_detections2D["Mug"]


@pytest.mark.parametrize(
    "agent_cameras, top_cameras, attached",
    [([], None, 2), (None, None, 2), ([], [{"id": 0}], 1), (None, [{"id": 0}], 1), ([{"id": 0}], None, 1)],
)
def test_third_party_images_without_the_agent_s_camera_list(agent_cameras, top_cameras, attached):
    # AI2-THOR attaches one image per camera of the agent's own list (none when it is null or empty);
    # renderd falls back on the message's list, then on every image the message holds.
    fields = [(FieldType.THIRD_PARTY_IMAGE, bytes([i]) * 60) for i in range(2)]
    ours, theirs = _both(5, 4, {"thirdPartyCameras": agent_cameras}, fields, top_cameras)
    assert len(theirs.third_party_camera_frames) == (1 if agent_cameras else 0)
    assert [int(f[0, 0, 0]) for f in ours.third_party_camera_frames] == list(range(attached))
