"""``renderd start``'s logging (renderd.daemon.commands.configure_logging) in a process of its own: a log call
never waits for stderr; records dropped while stderr is not read are counted exactly and reported where they
were dropped, in the usual format (journald's too); records from threads and from forked children arrive; and
the process exits in bounded time with stderr still not read.
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)

#: Lines the child logs: more than a one-page pipe and the log queue (1000 records) hold.
LINES = 3000


def _child(code: str, *, journal: bool = False, small: bool = True) -> tuple[subprocess.Popen, int]:
    """A Python child running ``code`` after configure_logging("info"), its stderr a pipe (of one page if
    ``small``) the test reads only when it wants (returned: the process and the pipe's read end, non-blocking);
    its stdin and stdout pipes."""
    r, w = os.pipe()
    if small:
        try:
            fcntl.fcntl(r, F_SETPIPE_SZ, 4096)
        except OSError:
            pass
    env = {k: v for k, v in os.environ.items() if k != "JOURNAL_STREAM"}
    if journal:
        st = os.fstat(w)
        env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
    prologue = ("import logging, os, sys, threading\n"
                "from renderd.daemon.commands import configure_logging\n"
                "configure_logging('info')\n"
                "log = logging.getLogger('renderd.test')\n")
    proc = subprocess.Popen([sys.executable, "-c", prologue + textwrap.dedent(code)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=w, env=env)
    os.close(w)
    os.set_blocking(r, False)
    return proc, r


def _read_all(proc: subprocess.Popen, fd: int, timeout: float = 10.0) -> str:
    """Everything on the pipe until the child has exited and closed it."""
    data = b""
    deadline = time.monotonic() + timeout
    try:
        while True:
            assert time.monotonic() < deadline, f"the child's stderr did not end:\n{data[-2000:]!r}"
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                time.sleep(0.005)
                continue
            if not chunk:
                return data.decode()
            data += chunk
    finally:
        os.close(fd)


def _end(proc: subprocess.Popen, fd: int) -> None:
    """Leave nothing of the child behind: killed if still running, its stderr's read end (unless -1, closed
    already), its stdin and stdout closed."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(5)
    if fd >= 0:
        os.close(fd)
    proc.stdin.close()
    proc.stdout.close()


def _output_of(proc: subprocess.Popen, fd: int) -> str:
    """All the child's stderr, its stdin closed; it must exit with status 0. Nothing of it is left behind."""
    try:
        proc.stdin.close()
        text = _read_all(proc, fd)
        fd = -1
        assert proc.wait(10) == 0
    finally:
        _end(proc, fd)
    return text


def _wait_line(proc: subprocess.Popen, text: bytes, timeout: float = 10.0) -> None:
    """Until the child says ``text`` on stdout (it prints it once its log calls have returned)."""
    os.set_blocking(proc.stdout.fileno(), False)
    data = b""
    deadline = time.monotonic() + timeout
    while text not in data:
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait(5)
            pytest.fail(f"the child's log calls did not return while its stderr was not read (stdout {data!r})")
        try:
            data += os.read(proc.stdout.fileno(), 4096) or b""
        except BlockingIOError:
            time.sleep(0.005)


@pytest.mark.parametrize("journal", [False, True], ids=["plain", "journald"])
def test_lines_dropped_while_stderr_is_not_read_are_counted_where_they_were_dropped(journal):
    proc, fd = _child(f"""
        for i in range({LINES}):
            log.info("line %d", i)
        print("logged", flush=True)
        sys.stdin.read()  # until the test has read them all
    """, journal=journal)
    prefix = ("<6>", "<4>") if journal else ("INFO ", "WARNING ")
    line = re.compile(re.escape(prefix[0]) + r"renderd\.test: line (\d+)$")
    dropped = re.compile(re.escape(prefix[1]) + r"renderd: (\d+) log lines dropped while stderr was not being read$")
    last = -1  # the number of the last line read
    reports = 0
    pending = 0  # lines the reports since the last line said were dropped, not yet seen skipped
    try:
        _wait_line(proc, b"logged")
        # Read: each line whole, each report right where the lines it counts are missing, until every line
        # is accounted for (the report of the last ones comes once the writer has nothing else to write).
        data = b""
        deadline = time.monotonic() + 10.0
        while last + 1 + pending < LINES:
            assert time.monotonic() < deadline, f"{LINES - last - 1 - pending} lines neither written nor reported"
            try:
                data += os.read(fd, 65536)
            except BlockingIOError:
                time.sleep(0.005)
                continue
            *complete, data = data.split(b"\n")
            for raw in complete:
                text_line = raw.decode()
                if m := line.match(text_line):
                    n = int(m.group(1))
                    assert n == last + 1 + pending, f"line {n} after line {last} and a report of {pending} dropped"
                    last, pending = n, 0
                elif m := dropped.match(text_line):
                    # (two in a row when the record behind a report found the queue full again: it adds up)
                    pending += int(m.group(1))
                    reports += 1
                else:
                    raise AssertionError(f"unexpected line {text_line!r}: " + b"\n".join(complete).decode()[-3000:])
        assert reports >= 1 and last >= 0
        proc.stdin.close()
        assert _read_all(proc, fd) == data.decode() == ""  # nothing more, and the child exits
        fd = -1
        assert proc.wait(10) == 0
    finally:
        _end(proc, fd)


def test_the_process_exits_in_bounded_time_with_stderr_never_read():
    # A thread still logging as the process exits, and a queue full of records nobody will read.
    proc, fd = _child(f"""
        def chatter():
            while True:
                log.info("chatter")

        threading.Thread(target=chatter, daemon=True).start()
        for i in range({LINES}):
            log.info("line %d", i)
        print("logged", flush=True)
        sys.exit(3)
    """)
    try:
        _wait_line(proc, b"logged")
        try:
            code = proc.wait(10.0)  # (its flush at exit waits LOG_FLUSH_TIMEOUT, 1 s)
        except subprocess.TimeoutExpired:
            pytest.fail("the process did not exit with its stderr not read")
        assert code == 3  # its own exit status: not an abort for a lock held at exit
    finally:
        _end(proc, fd)


def test_records_from_threads_and_forked_children_all_arrive():
    # Fewer records than the queue holds, and a pipe of the default size the test reads: nothing is dropped.
    proc, fd = _child("""
        import subprocess

        def lines(name):
            for i in range(200):
                log.info("%s %d", name, i)

        threads = [threading.Thread(target=lines, args=(f"thread{n}",)) for n in range(4)]
        for t in threads:
            t.start()
        for n in range(3):  # children forked (and exec'd, as players are) while the threads log
            subprocess.run(["true"], check=True, preexec_fn=lambda: None)
            pid = os.fork()
            if pid == 0:  # a forked child's own records: written by it, not queued for a writer it lacks
                log.info("child %d", n)
                os._exit(0)
            assert os.waitpid(pid, 0)[1] == 0
        for t in threads:
            t.join()
        log.info("main done")
    """)
    text = _output_of(proc, fd)
    lines = text.splitlines()
    for n in range(4):
        mine = [line for line in lines if line.startswith(f"INFO renderd.test: thread{n} ")]
        assert mine == [f"INFO renderd.test: thread{n} {i}" for i in range(200)]
    assert sorted(line for line in lines if " child " in line) == [f"INFO renderd.test: child {n}" for n in range(3)]
    assert lines[-1] == "INFO renderd.test: main done"
    assert len(lines) == 4 * 200 + 3 + 1, [line for line in lines if "thread" not in line]


def test_records_logged_after_the_writer_stopped_never_wait_for_stderr():
    # (at exit, after renderd start's stop_logging: an atexit handler that logs) With stderr not read, they are
    # written while the pipe has room (a pipe of the default size, 64 KiB: fewer bytes than the lines), then
    # dropped; the process exits.
    proc, fd = _child(f"""
        from renderd.daemon.commands import stop_logging
        log.info("before the stop")
        stop_logging()
        for i in range({LINES}):
            log.info("line %d", i)
        print("logged", flush=True)
    """, small=False)
    try:
        _wait_line(proc, b"logged")
        assert proc.wait(10.0) == 0
        text = _read_all(proc, fd)
        fd = -1
    finally:
        _end(proc, fd)
    lines = text.splitlines()
    assert lines[0] == "INFO renderd.test: before the stop"
    assert lines[1:] == [f"INFO renderd.test: line {i}" for i in range(len(lines) - 1)]
    assert 1 < len(lines) < LINES


def test_lines_are_written_before_the_log_call_returns_when_stderr_is_read():
    # stderr with room (a pipe of the default size, read): each line is out before its log call returns, in
    # order, so the lines logged just before the process is killed (a watchdog's SIGKILL, an abort) are not lost
    # in a queue. The child logs, then ends with os._exit (no flush at exit); every line must have arrived.
    proc, fd = _child("""
        for i in range(200):
            log.info("line %d", i)
        os._exit(0)
    """, small=False)
    text = _output_of(proc, fd)
    assert text.splitlines() == [f"INFO renderd.test: line {i}" for i in range(200)]
