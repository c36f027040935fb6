"""The account of what a player silent at its start_timeout did with its pipes ("it has not opened server.pipe",
FifoChannel.silence()) looks at where the player's /proc/PID/fd links point, never at the files they name: a
player holding a file open on a filesystem that hangs (a network mount whose server is gone) fails to boot with
the account as usual. Before, silence() stat-ed each link, which asks the file's filesystem: the supervisor's loop
waited there as long as the mount hung (no boot failure, no restart, nothing else the loop does).

The hung filesystem is a FUSE mount served by a thread of the test, which leaves the file's GETATTR requests
unanswered until the test ends. Mounting needs root and /dev/fuse: skipped without them.
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import shutil
import stat
import struct
import subprocess
import tempfile
import threading

import pytest

from tests.daemon.conftest import wait_for

IN_HEADER = struct.Struct("<IIQQIIIHH")  # fuse_in_header: len, opcode, unique, nodeid, uid, gid, pid, extlen, pad
OUT_HEADER = struct.Struct("<IiQ")  # fuse_out_header: len, error, unique
ATTR = struct.Struct("<QQQQQQIIIIIIIIII")  # fuse_attr
LOOKUP, FORGET, GETATTR, OPEN, RELEASE, FLUSH, INIT = 1, 2, 3, 14, 18, 25, 26  # opcodes
INTERRUPT, DESTROY, BATCH_FORGET = 36, 38, 42
ROOT, FILE = 1, 2  # node ids


def _attr(node: int) -> bytes:
    mode, nlink = (stat.S_IFDIR | 0o755, 2) if node == ROOT else (stat.S_IFREG | 0o644, 1)
    return ATTR.pack(node, 0, 0, 0, 0, 0, 0, 0, 0, mode, nlink, os.getuid(), os.getgid(), 0, 4096, 0)


class HungFS:
    """A FUSE filesystem holding one empty file, ``path``: it opens, but a stat of it waits (its GETATTR is left
    unanswered, ``held`` counts them) until :meth:`close`. Attributes are never cached (valid 0 s): every stat asks."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="renderd-hungfs-")
        self.path = os.path.join(self.dir, "file")
        self.held: list[int] = []
        self.waiters: list[subprocess.Popen] = []  # processes of the test waiting on the mount: reaped by close()
        self._closing = threading.Event()
        self._libc = ctypes.CDLL(None, use_errno=True)
        try:
            self.fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
        except OSError as exc:
            os.rmdir(self.dir)
            pytest.skip(f"no FUSE: {exc}")
        opts = f"fd={self.fd},rootmode=40000,user_id={os.getuid()},group_id={os.getgid()}".encode()
        if self._libc.mount(b"renderd-hungfs", self.dir.encode(), b"fuse", 0, opts) != 0:
            code = ctypes.get_errno()
            os.close(self.fd)
            os.rmdir(self.dir)
            pytest.skip(f"cannot mount a FUSE filesystem here: {os.strerror(code)}")
        self._thread = threading.Thread(target=self._serve, name="hungfs", daemon=True)
        self._thread.start()

    def _reply(self, unique: int, body: bytes = b"", error: int = 0) -> None:
        try:
            os.write(self.fd, OUT_HEADER.pack(OUT_HEADER.size + len(body), -error, unique) + body)
        except OSError:  # (the request was interrupted meanwhile)
            pass

    def _serve(self) -> None:
        while not self._closing.is_set():
            if not select.select([self.fd], [], [], 0.05)[0]:
                continue
            try:
                data = os.read(self.fd, 1 << 20)
            except OSError:
                return
            length, opcode, unique, node, *_ = IN_HEADER.unpack_from(data)
            body = data[IN_HEADER.size:length]
            if opcode in (FORGET, BATCH_FORGET, INTERRUPT):  # (no answer)
                continue
            if opcode == INIT:  # protocol 7.22, without features
                self._reply(unique, struct.pack("<IIIIHHI", 7, 22, 0, 0, 0, 0, 4096))
            elif opcode == LOOKUP:
                if node == ROOT and body.split(b"\0", 1)[0] == b"file":
                    self._reply(unique, struct.pack("<QQQQII", FILE, 0, 0, 0, 0, 0) + _attr(FILE))
                else:
                    self._reply(unique, error=errno.ENOENT)
            elif opcode == GETATTR and node == FILE:
                self.held.append(unique)  # hung
            elif opcode == GETATTR:
                self._reply(unique, struct.pack("<QII", 0, 0, 0) + _attr(node))
            elif opcode == OPEN:
                self._reply(unique, struct.pack("<QII", 1, 0, 0))
            elif opcode in (RELEASE, FLUSH, DESTROY):
                self._reply(unique)
            else:
                self._reply(unique, error=errno.ENOSYS)

    def close(self) -> None:
        """Answer: the connection is closed (every request waiting fails), the mount detached, and the processes
        in ``waiters`` (stuck on the mount until then) reaped."""
        self._closing.set()
        self._thread.join(5)
        os.close(self.fd)
        self._libc.umount2(self.dir.encode(), 2)  # MNT_DETACH
        os.rmdir(self.dir)
        for process in self.waiters:
            process.kill()
            process.wait(10)


@pytest.fixture
def hung_fs():
    fs = HungFS()
    try:
        yield fs
    finally:
        fs.close()


def test_a_silent_player_holding_a_file_on_a_hung_mount_fails_to_boot_with_its_account(daemon, hung_fs):
    # The filesystem is hung for a stat of the file. The stat that shows it is a child process's, never a thread of
    # this one: a thread waiting on the mount would keep this process from exiting if the test ended without
    # closing the filesystem (the connection closes with the last descriptor of /dev/fuse, held here).
    # (It waits until the filesystem is closed, not even a SIGKILL ends it sooner: the fixture closes it first.)
    hung_fs.waiters.append(subprocess.Popen(["stat", hung_fs.path], stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL))
    wait_for(lambda: hung_fs.held, 5.0, "a stat of the file to wait on the hung filesystem")
    # A player that opens the file (an asset on the mount, say) and then sends nothing, never opening server.pipe.
    script = f"exec 4< {hung_fs.path}; exec sleep 60"
    d = daemon(f"""
        [daemon]
        max_boot_failures = 1

        [environments.demo]
        executable = ["/bin/sh", "-c", "{script}"]
        platform = "headless"
        start_timeout = 0.5
    """, ready=False)
    wait_for(d.health, 30.0, "the daemon to answer")
    try:
        players = d.wait_players(lambda ps: ps[0]["state"] == "FAILED", timeout=10.0,
                                 what="the silent player's boot failure")
    except AssertionError:
        pytest.fail(f"the silent player did not fail to boot: the daemon's account of its pipes waited on the hung "
                    f"filesystem ({len(hung_fs.held)} stat(s) of the file waiting)")
    assert players[0]["reason"].startswith("no first frame within start_timeout (0.5 s); it has not opened "
                                           "server.pipe"), players[0]["reason"]
    assert len(hung_fs.held) == 1  # the test's own stat only: the daemon asked the filesystem nothing


def test_a_player_that_opened_server_pipe_through_a_bind_mount_of_its_own_is_said_to_have_opened_it(daemon, tmp_path):
    # The link's text names the pipe by the player's path (its own mount namespace, the pipe's directory bound
    # on another directory): the account then tells the pipe by its inode number and its mount's device, from
    # /proc alone, as it did with stat.
    if os.geteuid() != 0 or not shutil.which("unshare") or subprocess.run(
            ["unshare", "-m", "true"], capture_output=True, timeout=30).returncode != 0:
        pytest.skip("needs root and unshare -m")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    script = (f"mount --bind $(dirname $AI2THOR_FIFO_SERVER_PIPE_PATH) {mnt} && exec 4> {mnt}/server.pipe "
              "&& exec sleep 60")
    d = daemon(f"""
        [daemon]
        max_boot_failures = 1

        [environments.demo]
        executable = ["unshare", "-m", "--propagation", "private", "/bin/sh", "-c", "{script}"]
        platform = "headless"
        start_timeout = 0.5
    """, ready=False)
    wait_for(d.health, 30.0, "the daemon to answer")
    players = d.wait_players(lambda ps: ps[0]["state"] == "FAILED", timeout=10.0, what="the player's boot failure")
    assert players[0]["reason"].startswith("no first frame within start_timeout (0.5 s); it opened server.pipe but "
                                           "has sent nothing on it"), players[0]["reason"]
