"""``[daemon] socket_group``: the socket becomes 0660 and the directories on the way to it, the players'
pipe directories and the log directory 0750 (pipes 0660, player logs 0640), all with that group; a user
in the group can lease a player and step it, a user outside it cannot even connect."""

from __future__ import annotations

import grp
import os
import shutil
import stat
import subprocess
import tempfile
import textwrap
from pathlib import Path

import pytest

from tests.daemon.conftest import DaemonProcess, fast_config


def _group() -> grp.struct_group:
    """``adm`` when this user may give files that group (root), else this user's own primary group."""
    if os.geteuid() == 0:
        try:
            return grp.getgrnam("adm")
        except KeyError:
            pass
    return grp.getgrgid(os.getgid())


GROUP = _group()
#: A client that uses only the standard library (run as another user, who cannot import renderd's
#: dependencies): lease a player, send one action over the pipes, read the answer's first field header.
CLIENT = r"""
import json, os, select, socket, struct, sys, time
sock_path = sys.argv[1]

def request(method, path, body):
    data = json.dumps(body).encode()
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(20)
        s.connect(sock_path)
        s.sendall(f"{method} {path} HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split()[1] in (b"200", b"201"), answer
    return json.loads(body)

try:
    lease = request("POST", "/v1/environments/demo/leases", {"client_pid": os.getpid(), "timeout": 10})
except PermissionError:
    print("denied")
    sys.exit(0)
rfd = os.open(lease["server_pipe"], os.O_RDONLY | os.O_NONBLOCK)
wfd = os.open(lease["client_pipe"], os.O_WRONLY | os.O_NONBLOCK)
action = json.dumps({"action": "Pass", "sequenceId": 1}).encode()
os.write(wfd, struct.pack("!BI", 2, len(action)) + action + b"\xff\x00\x00\x00\x00")
assert select.select([rfd], [], [], 10)[0], "no answer"
header = os.read(rfd, 5)
assert header[0] == 1, header  # METADATA first
request("DELETE", "/v1/leases/" + lease["lease"], {"clean": False})
print("stepped")
"""


def mode(path: str) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture(scope="module")
def group_daemon():
    base = Path(tempfile.mkdtemp(prefix="renderd-group-"))
    os.chmod(base, 0o755)  # reachable for the other user of the cross-user test
    d = DaemonProcess(base, fast_config(daemon=f'socket_group = "{GROUP.gr_name}"'),
                      socket=str(base / "sockdir" / "renderd.sock"))
    try:
        d.wait_ready()
        yield d
    finally:
        d.cleanup()
        shutil.rmtree(base, ignore_errors=True)


def test_socket_pipes_and_logs_belong_to_the_group(group_daemon) -> None:
    d = group_daemon
    run = d.runtime_dir
    players = os.path.join(run, "players")
    (pair,) = [os.path.join(players, name) for name in os.listdir(players)]
    for path in (run, os.path.dirname(d.socket), players, os.path.join(run, "logs"), pair):
        assert mode(path) == 0o750 and os.stat(path).st_gid == GROUP.gr_gid, f"{path}: {mode(path):04o}"
    assert stat.S_ISSOCK(os.lstat(d.socket).st_mode)
    assert mode(d.socket) == 0o660 and os.stat(d.socket).st_gid == GROUP.gr_gid
    for name in ("server.pipe", "client.pipe"):
        path = os.path.join(pair, name)
        assert mode(path) == 0o660 and os.stat(path).st_gid == GROUP.gr_gid, name
    (log,) = os.listdir(os.path.join(run, "logs"))
    assert mode(os.path.join(run, "logs", log)) == 0o640
    assert mode(os.path.join(run, "renderd.lock")) == 0o600  # the daemon's own


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None or not os.path.exists("/usr/bin/python3"),
                    reason="needs root, setpriv and a system Python to run a client as another user")
@pytest.mark.parametrize("groups,expected", [(GROUP.gr_name, "stepped"), ("", "denied")], ids=["member", "outsider"])
def test_only_members_of_the_group_get_in(group_daemon, groups: str, expected: str) -> None:
    script = Path(tempfile.mkdtemp(prefix="renderd-client-")) / "client.py"
    try:
        os.chmod(script.parent, 0o755)
        script.write_text(textwrap.dedent(CLIENT))
        os.chmod(script, 0o644)
        argv = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups" if not groups else f"--groups={groups}",
                "/usr/bin/python3", "-I", str(script), group_daemon.socket]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, cwd="/")
        assert out.returncode == 0 and out.stdout.strip() == expected, (out.stdout, out.stderr)
    finally:
        shutil.rmtree(script.parent, ignore_errors=True)
    group_daemon.wait_players(lambda ps: ps[0]["state"] == "READY", what="the player back to READY")
