"""Review of event assembly: errors about the metadata name the metadata field even when images follow it."""

from __future__ import annotations

import numpy as np
import pytest

from renderd.errors import ProtocolError
from renderd.event import FrameAssembler
from renderd.protocol import FieldType, encode_metadata

from tests.helpers.event_review14e import H, W, agent, message

RGB = np.zeros(H * W * 3, np.uint8)
DEPTH = np.zeros(H * W, "<f4")


@pytest.mark.parametrize(
    "metadata, match",
    [
        ({"agents": [agent(), agent(screenWidth=0)]}, "agents\\[1\\] has screen size 0 x"),
        ({"agents": [agent(), 7]}, "agents\\[1\\] is int"),
        ({"agents": [agent()], "activeAgentId": 3}, "activeAgentId 3"),
    ],
)
def test_malformed_metadata_before_images_names_the_metadata_field(metadata, match):
    # The agents each get their images, so the error comes after the first agent's images were read.
    m = message([(FieldType.METADATA, encode_metadata(metadata)), (FieldType.RGB_IMAGE, RGB),
                 (FieldType.DEPTH_IMAGE, DEPTH)])
    with pytest.raises(ProtocolError, match=match) as info:
        FrameAssembler().event(m)
    assert info.value.field_type == FieldType.METADATA and info.value.offset == m.offset


def test_a_patch_that_breaks_an_agent_after_images_names_the_patch_field():
    fa = FrameAssembler()
    fa.event(message([(FieldType.METADATA, encode_metadata({"agents": [agent(), agent()], "sequenceId": 0})),
                      (FieldType.RGB_IMAGE, RGB), (FieldType.RGB_IMAGE, RGB)]))
    m = message([(FieldType.METADATA_PATCH, encode_metadata({"agentId": 1, "screenHeight": -1}))])
    with pytest.raises(ProtocolError, match="agents\\[1\\] has screen size") as info:
        fa.event(m)  # the previous message's images are reused, and agent 0's are built first
    assert info.value.field_type == FieldType.METADATA_PATCH and info.value.offset == m.offset
