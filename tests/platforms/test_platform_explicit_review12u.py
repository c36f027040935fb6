"""A platform asked for by name that cannot serve the request: the error and doctor say that the requested
platform cannot, not that no platform can, and then name the others that could."""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from renderd.errors import PlatformError
from renderd.platforms import PlatformRequest, select
from renderd.platforms.doctor import doctor_command

NOTHING = {"DISPLAY": "", "VK_ICD_FILENAMES": "/nonexistent.json", "PATH": "/nonexistent"}


def test_a_requested_platform_that_cannot_serve_is_named_and_no_other_is_said_to_serve():
    with pytest.raises(PlatformError) as info:
        select(PlatformRequest(platform="OSXIntel64", system="Linux", env=NOTHING))
    message = str(info.value)
    assert message.startswith("The requested platform OSXIntel64 cannot serve 300x300 on Linux")
    assert "No platform can serve" not in message
    assert "No other platform that renders images can serve it either." in message
    result = CliRunner().invoke(doctor_command, ["--platform", "OSXIntel64", "--system", "Linux"], env=NOTHING,
                                catch_exceptions=False)
    assert result.exit_code == 1
    assert "=> the requested platform OSXIntel64 cannot serve this request." in result.output
    assert "no platform can serve" not in result.output
    assert "No other platform that renders images can serve it either." in result.output


@pytest.mark.skipif(shutil.which("Xvfb") is None, reason="needs Xvfb installed (a managed display is possible)")
def test_a_requested_platform_that_cannot_serve_names_the_others_without_a_contradiction():
    with pytest.raises(PlatformError) as info:
        select(PlatformRequest(platform="OSXIntel64", system="Linux"))
    message = str(info.value)
    assert message.startswith("The requested platform OSXIntel64 cannot serve")
    assert "No platform can serve" not in message
    assert "Other platforms that can serve this request: Linux64 (managed)" in message
    result = CliRunner().invoke(doctor_command, ["--platform", "OSXIntel64", "--system", "Linux"],
                                catch_exceptions=False)
    assert result.exit_code == 1
    out = result.output
    assert "=> the requested platform OSXIntel64 cannot serve this request." in out
    assert "no platform can serve" not in out
    assert "Other platforms that can serve this request: Linux64 (managed)" in out
