"""A request that only the headless platform could serve says so, whatever the platform asked for."""

from __future__ import annotations

import pytest

from renderd.errors import PlatformError
from renderd.platforms import PlatformRequest, select


def test_auto_on_a_system_without_platforms_points_at_headless():
    with pytest.raises(PlatformError) as info:
        select(PlatformRequest(system="FreeBSD"))
    message = str(info.value)
    assert "renderd knows no platform for FreeBSD" in message, message
    assert "platform='headless'" in message, message
    with select(PlatformRequest(system="FreeBSD", platform="headless")) as selection:
        assert selection.args == ["-batchmode", "-nographics"]


def test_an_explicit_platform_that_nothing_else_can_replace_points_at_headless():
    with pytest.raises(PlatformError) as info:
        select(PlatformRequest(system="FreeBSD", platform="OSXIntel64"))
    message = str(info.value)
    assert "No other platform that renders images can serve it either" in message, message
    assert "platform='headless'" in message, message
