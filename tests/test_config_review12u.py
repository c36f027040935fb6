"""renderd validate's value errors: the value given and what is allowed, and a hint for a misspelled choice."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from renderd.cli import main
from renderd.config import ConfigError, loads


@pytest.mark.parametrize("line, message", [
    # (as renderd.launch(width=0) says it)
    ("width = 0", "environments.demo.width: must be an integer 1..4096, got 0"),
    ("height = 5000", "environments.demo.height: must be an integer 1..4096, got 5000"),
    ("start_timeout = 0", "environments.demo.start_timeout: must be greater than 0 seconds, got 0"),
    ("health_interval = -1.5", "environments.demo.health_interval: must be 0 or more seconds, got -1.5"),
    ("instances = -1", "environments.demo.instances: must be 0 or more (at most 1024), got -1"),
    ('quality = "ultra"', "'ultra' is not one of: Very Low, Low, Medium, MediumCloseFitShadows, High, Very High, "
                          "Ultra, High WebGL; did you mean 'Ultra'?"),
    ('quality = "Ulta"', "did you mean 'Ultra'?"),
    ('platform = "cloudrendering"', "did you mean 'CloudRendering'?"),
    ('restart = "on_failure"', "did you mean 'on-failure'?"),
])
def test_a_value_error_says_the_value_and_what_is_allowed(line, message):
    with pytest.raises(ConfigError) as info:
        loads(f"[environments.demo]\n{line}\n", path="bad.toml", resolve=False)
    assert message in str(info.value), str(info.value)


def test_a_choice_nothing_like_any_gets_no_hint():
    with pytest.raises(ConfigError) as info:
        loads('[environments.demo]\ntransport = "carrier-pigeon"\n', path="bad.toml", resolve=False)
    assert "did you mean" not in str(info.value) and "is not one of: fifo, http" in str(info.value)


def test_renderd_validate_prints_it(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[daemon]\nmax_boot_failures = 0\n')
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 1
    assert f"{path}:2: daemon.max_boot_failures: must be greater than 0, got 0" in result.output, result.output


def test_renderd_validate_names_the_line_of_the_key(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('# lab\n[daemon]\nstop_grace = 2\n\n[environments.demo]\nexecutable = [\n  "/bin/true",\n]\n'
                    'quality = "ultra"   # here\n')
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: {path}:9: environments.demo.quality: 'ultra' is not one of"), result.output
    path.write_text('[environments."demo"]\n"width" = 0\n[daemon]\nstop_grce = 1\n')
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.output.startswith(f"Error: {path}:4: daemon.stop_grce: unknown key; did you mean"), result.output


@pytest.mark.parametrize("text", [
    # a dotted key, an inline table, a multi-line string (whose lines could look like a key): no line rather than
    # a wrong one
    '[environments]\ndemo.width = 0\n',
    '[environments]\ndemo = {width = 0}\n',
    '[environments.demo]\nexecutable = ["/bin/sh", "-c", """\nwidth = 1\n"""]\nwidth = 0\n',
])
def test_no_line_when_it_cannot_be_told_for_sure(tmp_path, text):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: {path}: environments.demo.width: must be an integer"), result.output
