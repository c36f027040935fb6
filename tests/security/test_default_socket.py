"""A user without ``XDG_RUNTIME_DIR`` has the default socket ``/tmp/renderd-UID/renderd.sock``: a directory name
anyone can take first. Another user who made it could answer ``renderd.connect()`` with pipes of their choice
(frames of their making; a file of the victim's as ``client.pipe``). Clients refuse a socket there unless the
directory is the user's own."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile

import pytest

from tests.helpers.health_as_review15m import health_as
from tests.helpers.http_util import json_response, serving

NOBODY = 65534
OTHER_UID = 12345  # someone else, who made the directory first


#: What the fake daemon answers every request with.
FAKE_HEALTH = json_response({"version": "9", "status": "ready", "pid": 1, "uptime": 1.0, "environments": {}})


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as two users")
def test_a_default_socket_directory_made_by_another_user_is_refused() -> None:
    directory = f"/tmp/renderd-{NOBODY}"
    if os.path.lexists(directory):
        pytest.skip(f"{directory} exists already")
    os.mkdir(directory, 0o755)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.chown(directory, OTHER_UID, OTHER_UID)
        server.bind(os.path.join(directory, "renderd.sock"))
        os.chmod(os.path.join(directory, "renderd.sock"), 0o666)
        server.listen(4)
        with serving(server, lambda request: FAKE_HEALTH):
            answer = _health_as_nobody()  # the victim: user nobody, no XDG_RUNTIME_DIR, no RENDERD_SOCKET
        assert answer.startswith("refused: "), answer
        assert directory in answer and f"uid {OTHER_UID}" in answer and "RENDERD_SOCKET" in answer, answer
    finally:
        server.close()
        shutil.rmtree(directory, ignore_errors=True)


def _health_as_nobody() -> str:
    """``ControlClient().health()`` as user nobody (the default socket /tmp/renderd-65534/renderd.sock)."""
    return health_as(NOBODY)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_a_default_socket_directory_that_is_the_users_own_symlink_to_their_own_directory_is_used() -> None:
    # /tmp/renderd-UID as a symlink the user made to a directory of theirs: the daemon runs there (it checks
    # the directory the path leads to), so the client must talk to it, not call it someone else's.
    directory = f"/tmp/renderd-{NOBODY}"
    if os.path.lexists(directory):
        pytest.skip(f"{directory} exists already")
    target = tempfile.mkdtemp(prefix="renderd-test-own-")  # 0700, reachable from /tmp
    os.chown(target, NOBODY, NOBODY)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.symlink(target, directory)
        os.lchown(directory, NOBODY, NOBODY)
        server.bind(os.path.join(target, "renderd.sock"))
        os.chown(os.path.join(target, "renderd.sock"), NOBODY, NOBODY)
        server.listen(4)
        with serving(server, lambda request: FAKE_HEALTH):
            answer = _health_as_nobody()
        assert answer.startswith("answered: "), answer
    finally:
        server.close()
        if os.path.islink(directory):
            os.unlink(directory)
        shutil.rmtree(target, ignore_errors=True)
