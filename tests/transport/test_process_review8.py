"""The player process, review 8: what a PlayerCrashed quotes from the player's log when the log is not a
plain text file of short lines (a FIFO read by a logger, one huge line, binary bytes, terminal escapes).
Real child processes; nothing may be left behind (``no_leaks``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from renderd.errors import PlayerCrashed, RenderdError
from renderd.process import LOG_TAIL_LINES, PlayerProcess

from tests.helpers.leaks import pid_gone

from .conftest import wait_until

pytestmark = pytest.mark.usefixtures("no_leaks")


def crash_of(argv, log_path) -> PlayerCrashed:
    """The PlayerCrashed of a player ``argv`` that writes to ``log_path`` and exits (it must exit)."""
    proc = PlayerProcess.spawn(argv, None, log_path)
    try:
        assert proc.wait(30) is not None, "the player did not exit"
        return proc.crashed("the test player exited")
    finally:
        proc.stop(1.0)


def open_writer(fifo, held: list[int]) -> bool:
    """Open ``fifo`` for writing (into ``held``) once a reader has it open."""
    try:
        held.append(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        return False
    return True


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_log_that_is_a_fifo_read_by_a_logger_does_not_block_the_crash_report(tmp_path):
    # The log goes to a FIFO a logger reads (accepted: it has a reader). Once the player and the logger are
    # gone, opening that FIFO to quote its "last lines" would wait for a writer forever (and would steal
    # the logger's bytes before that): the report must come at once, quoting nothing.
    fifo = tmp_path / "player.log"
    os.mkfifo(fifo)
    logger = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.DEVNULL)
    try:
        held: list[int] = []  # a write end held until the player has its own, so the logger sees no end yet
        assert wait_until(lambda: open_writer(fifo, held), 30), "the logger did not open the FIFO"
        try:
            proc = PlayerProcess.spawn(python("import sys; print('bye'); sys.exit(3)"), None, fifo)
        finally:
            os.close(held[0])
        try:
            assert proc.wait(30) == 3
            assert logger.wait(30) == 0  # (it saw the end of the log)
            result: dict[str, object] = {}
            reporter = threading.Thread(target=lambda: result.update(error=proc.crashed("it exited")), daemon=True)
            reporter.start()
            reporter.join(10)
            blocked = reporter.is_alive()
            if blocked:  # let the stuck open go (a writer appears), so the test leaves nothing behind
                fd = os.open(fifo, os.O_WRONLY)
                reporter.join(10)
                os.close(fd)
            assert not blocked, "crashed() blocked opening a FIFO log"
            error = result["error"]
            assert isinstance(error, PlayerCrashed) and error.returncode == 3
            assert error.log_tail == ""
        finally:
            proc.stop(1.0)
    finally:
        logger.kill()
        logger.wait()


def test_a_huge_last_line_is_quoted_shortened(tmp_path):
    # A player that dumped megabytes without a newline (a progress bar, a base64 blob): the error still
    # quotes its end, shortened, not 64 KiB of it.
    error = crash_of(python("import sys; sys.stdout.write('early\\n' + 'x' * 5_000_000 + 'END'); sys.exit(3)"),
                     tmp_path / "player.log")
    assert error.returncode == 3
    assert len(str(error)) < 4000, len(str(error))
    assert "x" * 100 in error.log_tail


def test_binary_bytes_and_terminal_escapes_are_quoted_escaped(tmp_path):
    # Raw bytes in the log (a core dump, a binary blob, colour codes) must not reach the terminal that prints
    # the error: an escape sequence would clear it or retitle it, a carriage return would hide text. Control
    # characters are shown escaped, and only newlines separate the quoted lines.
    code = (
        "import os, sys\n"
        "os.write(1, b''.join(b'line %d\\n' % i for i in range(30)))\n"
        "os.write(1, b'colour \\x1b[31mred\\x1b[0m \\x1b]0;title\\x07 cr\\rhidden\\n')\n"
        "os.write(1, b'form\\x0cfeed \\x1c\\x1d\\x1e vt\\x0b nul\\x00 del\\x7f c1\\xc2\\x85\\xc2\\x9b bad\\xff\\n')\n"
        "os.write(1, b'last words')\n"
        "sys.exit(3)\n"
    )
    error = crash_of(python(code), tmp_path / "player.log")
    text = str(error)
    assert not any(ord(c) < 32 and c != "\n" or 0x7F <= ord(c) <= 0x9F for c in text), repr(text)
    tail = error.log_tail.split("\n")
    assert len(tail) == LOG_TAIL_LINES
    assert tail[-1] == "last words"
    assert tail[-3] == "colour \\x1b[31mred\\x1b[0m \\x1b]0;title\\x07 cr\\x0dhidden"
    assert tail[-2].startswith("form\\x0cfeed \\x1c\\x1d\\x1e vt\\x0b nul\\x00 del\\x7f c1\\x85\\x9b bad")
    assert tail[0] == "line 13"  # (the 20 lines are the log's last 20)


@pytest.mark.parametrize("ignores_sigterm", [False, True], ids=["cooperative", "ignores-sigterm"])
def test_a_child_the_player_started_in_a_session_of_its_own_is_stopped_with_it(tmp_path, ignores_sigterm):
    # A player (or the wrapper script that starts it) runs a helper with setsid / start_new_session: the
    # helper is outside the player's process group, so SIGTERM and SIGKILL to the group miss it, and it ran on
    # after stop(), reparented away. stop() ends it too: SIGTERM, the same grace, SIGKILL.
    helper = "import signal, time\n" + (
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignores_sigterm else ""
    ) + "print('helper ready', flush=True)\ntime.sleep(600)\n"
    code = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', {helper!r}], start_new_session=True, stdout=subprocess.PIPE)\n"
        "p.stdout.readline()\n"
        "print('helper', p.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    log_path = tmp_path / "player.log"
    proc = PlayerProcess.spawn(python(code), None, log_path)
    helper_pid = None
    try:
        assert wait_until(lambda: "helper " in log_path.read_text(), 30), log_path.read_text()
        helper_pid = int(log_path.read_text().split("helper ")[1].split()[0])
        assert os.getsid(helper_pid) == helper_pid != os.getpgid(proc.pid)
        proc.stop(0.3)  # (a grace the SIGTERM-ignoring helper waits out in full)
        assert wait_until(lambda: pid_gone(helper_pid), 10), "the helper outlived the player's stop()"
    finally:
        proc.stop(0.3)
        if helper_pid is not None and not pid_gone(helper_pid):
            os.kill(helper_pid, signal.SIGKILL)


def test_a_script_without_a_shebang_line_says_what_is_missing(tmp_path):
    # An executable file the kernel cannot run (a shell script without its "#!" line, a binary for another
    # architecture) fails with ENOEXEC: the error says what that means, naming the program once.
    script = tmp_path / "player.sh"
    script.write_text("echo hello\n")
    script.chmod(0o755)
    with pytest.raises(RenderdError) as info:
        PlayerProcess.spawn([str(script)], None, tmp_path / "player.log")
    message = str(info.value)
    assert "#!" in message and "ENOEXEC" in message
    assert message.count(str(script)) == 1, message
