"""``/tmp/renderd-UID`` (the default socket's directory of a user without ``XDG_RUNTIME_DIR``) as a symlink that
another user made, pointing at a directory of the user's: it passes a check of where it leads, but its maker can
point it at a directory of theirs at any moment (between the client's check and its connect, or at any later
connection), so clients refuse it."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile

import pytest

from tests.helpers.health_as_review15m import health_as
from tests.helpers.http_util import json_response, serving

VICTIM = 61515  # a user of its own for this test (no XDG_RUNTIME_DIR, no RENDERD_SOCKET)
OTHER_UID = 61516  # someone else, who made the symlink

FAKE_HEALTH = json_response({"version": "9", "status": "ready", "pid": 1, "uptime": 1.0, "environments": {}})


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as two users")
def test_a_default_socket_directory_that_is_another_users_symlink_is_refused() -> None:
    directory = f"/tmp/renderd-{VICTIM}"
    if os.path.lexists(directory):
        pytest.skip(f"{directory} exists already")
    target = tempfile.mkdtemp(prefix="renderd-test-victim-")  # the victim's own directory, its daemon's socket
    os.chown(target, VICTIM, VICTIM)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.symlink(target, directory)
        os.lchown(directory, OTHER_UID, OTHER_UID)  # made by the other user, who may replace it at will
        server.bind(os.path.join(target, "renderd.sock"))
        os.chown(os.path.join(target, "renderd.sock"), VICTIM, VICTIM)
        server.listen(4)
        with serving(server, lambda request: FAKE_HEALTH):
            answer = health_as(VICTIM)
        assert answer.startswith("refused: "), answer
        assert directory in answer and f"uid {OTHER_UID}" in answer and "symlink" in answer, answer
        assert "RENDERD_SOCKET" in answer, answer
    finally:
        server.close()
        if os.path.islink(directory):
            os.unlink(directory)
        shutil.rmtree(target, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_a_default_socket_directory_that_is_roots_symlink_to_the_users_directory_is_used() -> None:
    """Guard: root can do anything already; a symlink of root's (an administrator's) stays usable."""
    directory = f"/tmp/renderd-{VICTIM}"
    if os.path.lexists(directory):
        pytest.skip(f"{directory} exists already")
    target = tempfile.mkdtemp(prefix="renderd-test-victim-")
    os.chown(target, VICTIM, VICTIM)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.symlink(target, directory)
        server.bind(os.path.join(target, "renderd.sock"))
        os.chown(os.path.join(target, "renderd.sock"), VICTIM, VICTIM)
        server.listen(4)
        with serving(server, lambda request: FAKE_HEALTH):
            answer = health_as(VICTIM)
        assert answer.startswith("answered: "), answer
    finally:
        server.close()
        if os.path.islink(directory):
            os.unlink(directory)
        shutil.rmtree(target, ignore_errors=True)
