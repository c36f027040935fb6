"""The configuration: what an unknown key was likely meant to be."""

from __future__ import annotations

import pytest

from renderd.config import ConfigError, loads, parse_environment


@pytest.mark.parametrize("text, key, hint", [
    # A typo of a known key: the key it is close to.
    ("[daemon]\nstop_grce = 3\n", "daemon.stop_grce", "unknown key; did you mean 'stop_grace'?"),
    ("[environments.demo]\nwidht = 3\n", "environments.demo.widht", "unknown key; did you mean 'width'?"),
    ("[deamon]\n", "deamon", "unknown table or key; did you mean 'daemon'?"),
    # A key of the other table: where it goes.
    ("[daemon]\ninstances = 2\n", "daemon.instances", "unknown key; instances is a key of [environments.NAME]"),
    ("[environments.demo]\nstop_grace = 2\n", "environments.demo.stop_grace",
     "unknown key; stop_grace is a key of [daemon]"),
    ("width = 3\n", "width", "unknown table or key; width is a key of [environments.NAME]"),
    # An environment's keys written straight into [environments], which holds one table per environment.
    ('[environments]\nexecutable = "renderd-player"\n', "environments.executable",
     "executable is a key of an environment, and each environment is a table of its own: [environments.NAME]"),
])
def test_an_unknown_key_says_what_it_was_likely_meant_to_be(text, key, hint):
    # The message listed every known key and left the reader to find the one a typo or a misplaced key meant.
    with pytest.raises(ConfigError) as info:
        loads(text, path="renderd.toml", resolve=False)
    assert info.value.key == key
    assert hint in str(info.value), str(info.value)


def test_an_unknown_key_like_no_known_one_gets_no_guess_and_put_bodies_get_the_same_hints():
    with pytest.raises(ConfigError) as info:
        loads("[environments.demo]\nzzz = 1\n", path="renderd.toml", resolve=False)
    assert "unknown key (known keys: executable, width," in str(info.value)
    with pytest.raises(ConfigError) as info:
        parse_environment("demo", {"heigth": 3}, source="PUT /v1/environments/demo", resolve=False)
    assert "environments.demo.heigth: unknown key; did you mean 'height'?" in str(info.value)
