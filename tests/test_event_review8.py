"""Malformed metadata the event needs is a ProtocolError that says where (the metadata field's stream offset
and type), and a rejected message is not what a later METADATA_PATCH is merged into."""

from __future__ import annotations

import pytest

from renderd.errors import ProtocolError
from renderd.event import FrameAssembler
from renderd.protocol import FieldType, encode_metadata

from tests.helpers.event_review14e import agent, message

BAD = [
    ({"sequenceId": 0}, "no 'agents' list"),
    ({"agents": True, "sequenceId": 0}, "no 'agents' list"),
    ({"agents": [7]}, "agents\\[0\\] is int"),
    ({"agents": [agent(screenWidth="x")]}, "screenWidth/screenHeight"),
    ({"agents": [agent(screenWidth=0)]}, "screen size 0 x"),
    ({"agents": [agent()], "activeAgentId": 4}, "activeAgentId 4"),
]


@pytest.mark.parametrize("metadata, match", BAD)
def test_malformed_metadata_names_the_field_and_its_offset(metadata, match):
    m = message([(FieldType.METADATA, encode_metadata(metadata))])
    with pytest.raises(ProtocolError, match=match) as info:
        FrameAssembler().event(m)
    assert info.value.offset == m.offset and info.value.field_type == FieldType.METADATA
    assert f"at byte offset {m.offset}" in str(info.value)


@pytest.mark.parametrize("metadata, match", BAD[:3])
def test_a_patch_after_a_rejected_message_is_not_merged_into_it(metadata, match):
    fa = FrameAssembler()
    with pytest.raises(ProtocolError, match=match):
        fa.event(message([(FieldType.METADATA, encode_metadata(metadata))]))
    # The rejected message is no base for a patch: a ProtocolError (never a TypeError from its bad agents).
    with pytest.raises(ProtocolError, match="before any full METADATA"):
        fa.event(message([(FieldType.METADATA_PATCH, encode_metadata({"agentId": 0}))]))


def test_a_patch_that_breaks_the_agents_names_the_patch_field():
    fa = FrameAssembler()
    fa.event(message([(FieldType.METADATA, encode_metadata({"agents": [agent()], "sequenceId": 0}))]))
    m = message([(FieldType.METADATA_PATCH, encode_metadata({"agentId": 0, "screenWidth": -3}))])
    with pytest.raises(ProtocolError, match="screen size -3 x") as info:
        fa.event(m)
    assert info.value.offset == m.offset and info.value.field_type == FieldType.METADATA_PATCH
