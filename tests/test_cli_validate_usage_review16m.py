"""renderd validate takes a bad option value as renderd start does: a usage error (exit 2) naming the option; the
unit does not restart a daemon whose command line is wrong (exit 2), which no restart could mend."""

import configparser
import subprocess
from pathlib import Path

from tests.helpers.daemon_cli_review15m import RENDERD

ROOT = Path(__file__).resolve().parents[1]


def test_validate_with_a_bad_http_value_is_a_usage_error(tmp_path):
    config = tmp_path / "renderd.toml"
    config.write_text('[environments.demo]\nexecutable = "renderd-player"\n')
    out = subprocess.run([*RENDERD, "validate", str(config), "--http", "bogus"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2, out.stderr
    assert "Invalid value for --http: 'bogus' is not HOST:PORT" in out.stderr, out.stderr
    # The file's own errors keep exit 1.
    config.write_text('[environments.demo]\nexecutable = "renderd-player"\nwidth = -1\n')
    out = subprocess.run([*RENDERD, "validate", str(config)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stderr


def test_the_unit_does_not_restart_after_a_usage_error():
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str
    unit.read(ROOT / "systemd" / "renderd.service")
    assert unit["Service"]["Restart"] == "on-failure"
    assert unit["Service"]["RestartPreventExitStatus"].split() == ["2"]
