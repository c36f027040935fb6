"""``renderd doctor``: one entry per platform, the same reasons PlatformError carries, exit 0 only when
the request can be served, and --json for programs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from renderd.errors import PlatformError
from renderd.platforms import PlatformRequest, select
from renderd.platforms.doctor import doctor_command
from renderd.protocol import MAX_RESOLUTION

BIG = ["--width", "2001", "--height", "1001"]
NOTHING = {"DISPLAY": "", "VK_ICD_FILENAMES": "/nonexistent.json", "PATH": "/nonexistent"}


def run(args: list[str], env: dict[str, str] | None = None):
    return CliRunner().invoke(doctor_command, args, env=env, catch_exceptions=False)


def test_nothing_can_serve():
    result = run([*BIG, "--json"], env=NOTHING)
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert data["ok"] is False and data["selected"] is None
    assert [p["name"] for p in data["platforms"]] == ["Linux64", "CloudRendering", "OSXIntel64", "headless"]
    by_name = {p["name"]: p for p in data["platforms"]}
    assert not by_name["Linux64"]["valid"] and by_name["headless"]["valid"]
    # The same information as the PlatformError select() raises for the same request.
    request = PlatformRequest(system="Linux", width=2001, height=1001, env=NOTHING)
    with pytest.raises(PlatformError) as info:
        select(request)
    assert data["error"] == str(info.value)
    for report in info.value.reports:
        assert by_name[report.name]["reasons"] == report.reasons


def test_text_output_names_every_platform_and_fix():
    result = run(BIG, env=NOTHING)
    assert result.exit_code == 1
    for name in ("Linux64", "CloudRendering", "OSXIntel64", "headless"):
        assert name in result.output
    assert "fix: install Xvfb" in result.output and "=> no platform can serve this request." in result.output
    assert "headless was not tried" in result.output


def test_headless_is_served():
    result = run(["--headless"], env=NOTHING)
    assert result.exit_code == 0 and "=> headless serves this request" in result.output


@pytest.mark.vulkan
def test_explicit_platform():
    result = run(["--platform", "CloudRendering", "--json"], env={"VK_ICD_FILENAMES": "/nonexistent.json"})
    assert result.exit_code == 1
    data = json.loads(result.output)
    cloud = next(p for p in data["platforms"] if p["name"] == "CloudRendering")
    assert "VK_ICD_FILENAMES=/nonexistent.json" in cloud["reasons"][0]


@pytest.mark.xvfb
def test_x_display_and_gpus(xvfb):
    server = xvfb("-screen", "0", "320x240x24", "-screen", "1", "320x240x24", "+extension", "GLX")
    env = {"PATH": "/nonexistent"}
    ok = run(["--width", "320", "--height", "240", "--x-display", server.name, "--gpus", "1,0"], env=env)
    assert ok.exit_code == 0, ok.output
    assert f"=> Linux64 ({server.name})" in ok.output and "gpu 1 -> screen 1" in ok.output
    bad = run(["--x-display", f"{server.name}.4"], env=env)
    assert bad.exit_code == 1 and "screen 4 does not exist" in bad.output


def test_usage_errors():
    assert run(["--platform", "WebGL"]).exit_code == 2
    assert run(["--gpus", "a,b"]).exit_code == 2


def test_console_script():
    env = dict(os.environ, **{k: v for k, v in NOTHING.items() if k != "PATH"})
    done = subprocess.run(
        [sys.executable, "-c", "from renderd.cli import main; main()", "doctor", "--headless", "--json"],
        capture_output=True, text=True, env=env, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["selected"] == "headless"


@pytest.mark.parametrize(
    "gpus, why",
    [("0,0", "lists a device twice"), ("\u0663", "expected comma-separated GPU indices"),
     ("0,,1", "expected comma-separated"), ("-1", "expected comma-separated"), ("abc", "expected comma-separated")],
)
def test_gpus_are_checked_as_the_configuration_checks_them(gpus, why):
    # A real `renderd doctor`: a usage error naming the option, before any probe runs.
    argv = [sys.executable, "-c", "from renderd.cli import main; main()", "doctor", "--headless", "--gpus", gpus]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=dict(os.environ, **NOTHING))
    assert out.returncode == 2 and "Invalid value for --gpus:" in out.stderr and why in out.stderr, out
    ok = run(["--headless", "--gpus", " 1, 0 ", "--json"], env=NOTHING)
    assert ok.exit_code == 0 and json.loads(ok.output)["request"]["gpus"] == [1, 0]


@pytest.mark.parametrize("option", ["--width", "--height"])
def test_sizes_over_max_resolution_are_usage_errors(option):
    # Configuration, launch and the player refuse a side over MAX_RESOLUTION: doctor must not call it served.
    argv = [sys.executable, "-c", "from renderd.cli import main; main()", "doctor", "--headless", "--json"]
    out = subprocess.run([*argv, option, str(MAX_RESOLUTION + 1)], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, **NOTHING))
    assert out.returncode == 2 and f"Invalid value for '{option}'" in out.stderr, out
    assert out.stdout == ""
    assert run(["--headless", option, "0"], env=NOTHING).exit_code == 2
    ok = run(["--headless", option, str(MAX_RESOLUTION), "--json"], env=NOTHING)
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["request"][option[2:]] == MAX_RESOLUTION


JSON_KEYS = {"request", "platforms", "selected", "selected_details", "ok", "error"}


def test_json_carries_every_key_whether_served_or_not():
    served = run(["--headless", "--json"], env=NOTHING)
    assert served.exit_code == 0
    data = json.loads(served.output)
    assert set(data) == JSON_KEYS
    assert data["ok"] is True and data["selected"] == "headless" and data["error"] is None
    assert isinstance(data["selected_details"], dict)
    by_name = {p["name"]: p for p in data["platforms"]}
    assert data["selected_details"] == by_name["headless"]["details"]

    refused = run([*BIG, "--json"], env=NOTHING)
    assert refused.exit_code == 1
    data = json.loads(refused.output)
    assert set(data) == JSON_KEYS
    assert data["ok"] is False and data["selected"] is None and data["selected_details"] is None
    assert isinstance(data["error"], str) and data["error"]
