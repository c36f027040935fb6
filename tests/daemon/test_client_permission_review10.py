"""A client that may not use the daemon's socket is told why and what to change."""

from __future__ import annotations

import os
import pwd
import socket
import shutil
import subprocess
import sys
import tempfile

import pytest


def _request_as_nobody(path: str) -> subprocess.CompletedProcess:
    """GET /v1/health on ``path`` from a child that imports renderd as root (root's Python may be private),
    then runs the request as nobody; it prints the error and exits 3."""
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user 'nobody' here")
    code = (
        "import os, sys\n"
        "from renderd.daemon.client import ControlClient\n"
        f"os.setgroups([]); os.setgid({nobody.pw_gid}); os.setuid({nobody.pw_uid})\n"
        "try:\n"
        f"    ControlClient({path!r}, timeout=5).request('GET', '/v1/health')\n"
        "except Exception as exc:\n"
        "    print(exc)\n"
        "    sys.exit(3)\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd="/")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a client as another user")
def test_a_user_the_socket_is_private_from_is_told_about_socket_group():
    directory = tempfile.mkdtemp(prefix="renderd-perm-", dir="/tmp")  # a directory anyone may enter
    os.chmod(directory, 0o755)
    path = os.path.join(directory, "renderd.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(path)
        listener.listen(1)
        os.chmod(path, 0o600)  # as the daemon makes it without socket_group
        result = _request_as_nobody(path)
    finally:
        listener.close()
        shutil.rmtree(directory)
    assert result.returncode == 3, result
    message = result.stdout
    assert "permission denied" in message.lower(), message
    assert "socket_group" in message and "owner root" in message and "0600" in message, message


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a client as another user")
def test_a_directory_closed_to_the_user_is_named():
    outer = tempfile.mkdtemp(prefix="renderd-perm-", dir="/tmp")  # 0700, root's
    try:
        result = _request_as_nobody(os.path.join(outer, "renderd.sock"))
    finally:
        shutil.rmtree(outer)
    assert result.returncode == 3, result
    assert f"the directory {outer}" in result.stdout and "0700" in result.stdout, result.stdout
