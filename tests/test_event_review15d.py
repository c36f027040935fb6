"""A malformed ``colors`` list in a player's metadata: ``color_to_object_id`` / ``object_id_to_color`` say
which entry is wrong and why (a ProtocolError naming ``colors[i]``), not a bare KeyError or TypeError."""

from __future__ import annotations

import pytest

from renderd.errors import ProtocolError
from renderd.event import Event


def _event(colors) -> Event:
    return Event({"screenWidth": 2, "screenHeight": 2, "colors": colors})


@pytest.mark.parametrize(
    "colors, where",
    [
        ([{"name": "A|1", "color": [1, 2, 3]}, {"name": "B|1"}], "colors[1]"),
        ([None], "colors[0]"),
        ([{"name": "A|1", "color": None}], "colors[0]"),
        ([{"name": ["A"], "color": [1, 2, 3]}], "colors[0]"),
        ([{"name": "A|1", "color": [[1], 2, 3]}], "colors[0]"),
        ([{"color": [1, 2, 3]}], "colors[0]"),
        ("Fridge", "colors"),
        ({"name": "A|1", "color": [1, 2, 3]}, "colors"),
    ],
)
def test_malformed_colors_are_a_protocol_error_naming_the_entry(colors, where):
    for attr in ("color_to_object_id", "object_id_to_color"):
        with pytest.raises(ProtocolError) as info:
            getattr(_event(colors), attr)
        assert f"metadata {where} " in str(info.value), str(info.value)


def test_well_formed_and_absent_colors_still_give_the_maps():
    ev = _event([{"name": "A|1", "color": [1, 2, 3]}, {"name": "Wall", "color": (4, 5, 6)}])
    assert ev.color_to_object_id == {(1, 2, 3): "A|1", (4, 5, 6): "Wall"}
    assert ev.object_id_to_color == {"A|1": (1, 2, 3), "Wall": (4, 5, 6)}
    for colors in (None, []):
        assert _event(colors).color_to_object_id == {} and _event(colors).object_id_to_color == {}
    assert Event({"screenWidth": 2, "screenHeight": 2}).color_to_object_id == {}
