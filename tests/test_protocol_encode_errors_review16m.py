"""encode_message names the field and the remedy when a body is not bytes-like; the player's --help says which
unknown arguments it ignores (any: docs/player.md)."""

import subprocess
import sys

import pytest

from renderd.protocol import FieldType, encode_message, encode_metadata


def test_metadata_dict_is_refused_naming_the_field_and_encode_metadata() -> None:
    with pytest.raises(TypeError) as info:
        encode_message([(FieldType.METADATA, {"sequenceId": 1})])
    message = str(info.value)
    assert "METADATA" in message and "dict" in message and "encode_metadata" in message


def test_other_field_names_the_field_without_the_metadata_hint() -> None:
    with pytest.raises(TypeError) as info:
        encode_message([(FieldType.METADATA, encode_metadata({})), (FieldType.RGB_IMAGE, [1, 2, 3])])
    message = str(info.value)
    assert "RGB_IMAGE" in message and "list" in message and "encode_metadata" not in message


def test_player_help_says_every_unknown_argument_is_ignored() -> None:
    out = subprocess.run([sys.executable, "-m", "renderd.player", "--help"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert "Unknown single-dash" not in out
    assert "Unknown arguments" in out
