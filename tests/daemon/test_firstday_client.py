"""What a user sees from ``renderd status`` and ``ControlClient`` when the socket cannot be used at all."""

from __future__ import annotations

import os

import pytest

from renderd.config import MAX_SOCKET_PATH
from renderd.daemon.client import ControlClient
from renderd.errors import RenderdError


def test_a_socket_path_too_long_for_a_unix_address_is_reported_as_such(tmp_path):
    path = os.path.join(str(tmp_path), "s" * (MAX_SOCKET_PATH + 10) + ".sock")
    with pytest.raises(RenderdError) as info:
        ControlClient(path, timeout=2).health()
    message = str(info.value)
    assert message.startswith(f"cannot reach the renderd daemon at {path}: ")
    assert f"{len(os.fsencode(path))} bytes long" in message
    assert f"at most {MAX_SOCKET_PATH}" in message
    assert not os.path.exists(path)
