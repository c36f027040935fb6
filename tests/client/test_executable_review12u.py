"""An executable given as one string holding the program and its arguments is refused with the list to give."""

from __future__ import annotations

import shutil
import sys

import pytest

import renderd
import renderd.config
from renderd.errors import ConfigError


def test_launch_of_a_name_and_its_arguments_in_one_string_says_to_give_a_list(no_leaks):
    with pytest.raises(ConfigError) as info:
        renderd.launch("renderd-player --static-frame")
    text = str(info.value)
    assert info.value.key == "executable"
    assert "give the program and its arguments as a list: ['renderd-player', '--static-frame']" in text
    assert "give its full path" not in text


def test_a_path_and_its_arguments_in_one_string_says_to_give_a_list(no_leaks):
    true = shutil.which("true")
    with pytest.raises(ConfigError) as info:
        renderd.launch(f"{true} -x 'a b'")
    assert f"as a list: [{true!r}, '-x', 'a b']" in str(info.value)


def test_a_first_word_that_is_no_program_keeps_the_not_found_message(no_leaks):
    with pytest.raises(ConfigError) as info:
        renderd.launch("no-such-player-review12u --static-frame")
    text = str(info.value)
    assert "was not found next to" in text and text.endswith("give its full path")
    assert "as a list" not in text


def test_a_config_file_executable_with_its_arguments_says_to_give_a_list(tmp_path):
    path = tmp_path / "renderd.toml"
    path.write_text('[environments.a]\nexecutable = "renderd-player --static-frame"\n')
    with pytest.raises(ConfigError) as info:
        renderd.config.load(path)
    text = str(info.value)
    assert "environments.a.executable" in text
    assert "as a list: ['renderd-player', '--static-frame']" in text
    assert sys.executable in text
