"""A malformed ``colors`` entry in a player's metadata: the masks and detections built from the instance
segmentation image say which entry is wrong (a ProtocolError naming ``colors[i]``, as the colour maps do),
when they are first built; they never skip it (its object would look out of view)."""

from __future__ import annotations

import numpy as np
import pytest

from renderd.errors import ProtocolError
from renderd.event import FrameAssembler
from renderd.protocol import FieldType, encode_metadata
from tests.helpers.event_review14e import H, W, agent, message

MUG = {"name": "Mug|1", "color": [10, 0, 0]}
MASKS = ("instance_masks", "class_masks", "instance_detections2D", "class_detections2D",
         "third_party_instance_masks", "third_party_class_masks")


def _event(colors):
    ids = np.zeros((H, W, 4), np.uint8)
    ids[..., 3] = 255
    ids[0, :, 0] = 10  # Mug|1's pixels: the top row
    ids = np.ascontiguousarray(ids[::-1])  # sent bottom row first
    md = {"agents": [agent(colors=colors, thirdPartyCameras=[{"id": 0}])], "sequenceId": 0}
    m = message([(FieldType.METADATA, encode_metadata(md)), (FieldType.IDS_IMAGE, ids.reshape(-1)),
                 (FieldType.THIRD_PARTY_IMAGE_IDS, ids.reshape(-1))])
    return FrameAssembler().event(m)  # building the event reads no colours


@pytest.mark.parametrize(
    "colors, where",
    [
        ([MUG, {"name": "B|1"}], "colors[1]"),
        ([MUG, None], "colors[1]"),
        ([{"name": "A|1", "color": None}, MUG], "colors[0]"),
        ([MUG, {"name": ["A"], "color": [1, 2, 3]}], "colors[1]"),
        ([MUG, {"name": "A|1", "color": [[1], 2, 3]}], "colors[1]"),
        ([{"color": [1, 2, 3]}], "colors[0]"),
        ("Fridge", "colors"),
        ({"name": "A|1", "color": [1, 2, 3]}, "colors"),
    ],
)
def test_entries_the_colour_maps_reject_are_the_same_error_from_the_masks(colors, where):
    ev = _event(colors)
    with pytest.raises(ProtocolError) as maps:
        ev.object_id_to_color  # noqa: B018
    assert f"metadata {where} " in str(maps.value)
    for attr in MASKS:
        for _ in range(2):  # a failed build is not kept as empty masks
            with pytest.raises(ProtocolError) as info:
                getattr(ev, attr)
            assert str(info.value) == str(maps.value), attr
            assert info.value.field_type == FieldType.METADATA


@pytest.mark.parametrize(
    "color",
    [[300, 0, 0], [-1, 0, 0], [10, 0], [10, 0, 0, 255], [10.5, 0, 0], [10, 0, float("nan")]],
)
def test_a_colour_no_pixel_can_have_is_an_error_naming_the_entry(color):
    colors = [MUG, {"name": "Lamp|2", "color": color}]
    ev = _event(colors)
    for attr in MASKS:
        with pytest.raises(ProtocolError, match=r"metadata colors\[1\] is .*'Lamp\|2'.*three integers 0 to 255"):
            getattr(ev, attr)


def test_well_formed_colours_give_the_masks():
    colors = [{"name": "Mug|1", "color": [10.0, 0, 0]}, {"name": "Floor", "color": (0, 0, 40)}]
    ev = _event(colors)
    assert list(ev.instance_masks) == ["Mug|1"] and ev.instance_masks["Mug|1"][0].all()
    assert ev.instance_detections2D["Mug|1"] == (0, 0, W - 1, 0)
    assert list(ev.class_masks) == ["Mug"] and ev.class_detections2D["Mug"] == ((0, 0, W - 1, 0),)
    assert ev.class_masks["background"][1:].all() and not ev.class_masks["background"][0].any()
    assert list(ev.third_party_instance_masks[0]) == ["Mug|1"]
    for colors in (None, []):
        ev = _event(colors)
        assert dict(ev.instance_masks) == {} and dict(ev.class_masks) == {} and ev.class_masks["background"].all()
