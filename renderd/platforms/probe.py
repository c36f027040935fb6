"""Run a probe script in a short-lived child process with a deadline and read its one-line JSON answer.

Probes touch drivers and servers that may crash or hang (a Vulkan ICD that segfaults, an X server that
accepts a connection and never answers). Running them in a child of their own, in their own process
group, keeps that away from the daemon: a crash is a reason, a hang is killed at the deadline.

A probe never outlives its owner: it is started with ``PR_SET_PDEATHSIG = SIGKILL``, so it dies when
the thread that started it exits (with the process, or when the process is SIGKILLed while the probe
blocks on a frozen X server). :func:`run_probe` waits for the child on the thread that started it, so
probes may run on short-lived threads.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from renderd.errors import describe_exit
from renderd.process import die_with_parent

log = logging.getLogger(__name__)

#: How much of a probe's stderr is kept for a reason (the tail, in characters).
STDERR_TAIL_CHARS = 600
#: How much of a probe's stdout is kept (the tail, in characters), for the progress lines a probe prints.
STDOUT_TAIL_CHARS = 4000
#: Seconds to read what a killed probe left in its pipes. A helper a driver started in a session of its
#: own survives the kill of the probe's process group and may hold the pipes open; they are closed then.
PROBE_DRAIN_TIMEOUT = 1.0
#: Seconds to wait for the kernel to reap a probe after SIGKILL. A process in uninterruptible sleep (a wedged
#: GPU driver) does not die of it until the kernel call returns, perhaps never: it is then left behind, logged.
PROBE_REAP_TIMEOUT = 5.0


@dataclass
class ProbeOutcome:
    """What a probe child said: ``answer`` (the decoded JSON) or ``failure`` (why there is none)."""

    answer: dict[str, Any] | None
    failure: str | None
    stderr: str = ""
    #: The probe was killed at its deadline (``failure`` says so).
    timed_out: bool = False
    #: The tail of what the probe printed (progress lines: where a probe that hung or died got to).
    stdout: str = ""


def run_probe(
    script: str,
    args: Sequence[str],
    *,
    marker: str,
    env: Mapping[str, str],
    timeout: float,
    isolated: bool = False,
    on_start: Callable[[subprocess.Popen[bytes]], None] | None = None,
) -> ProbeOutcome:
    """Run ``python script args...`` and return the JSON that follows ``marker`` on its stdout.

    ``isolated`` runs the interpreter with ``-I`` (for stdlib-only probes); otherwise ``-P`` keeps the
    script's directory off ``sys.path``. Never raises for anything the child does: a crash, a timeout or
    garbled output come back as ``ProbeOutcome.failure``. Raises ``OSError`` only if the interpreter
    itself cannot be started.

    ``on_start`` is called with the child once it runs (a caller that gives up early may
    :func:`kill_probe` it from another thread; the outcome is then a failure).
    """
    argv = [sys.executable, "-I" if isolated else "-P", script, *args]
    reap_left_behind()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env),
        process_group=0,
        close_fds=True,
        preexec_fn=die_with_parent(os.getpid()),  # noqa: PLW1509 (only prctl, signal and getppid run in the child)
    )
    killed = False
    try:
        if on_start is not None:
            on_start(proc)
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        killed = True
        stdout, stderr = _drain(proc, script)
        answer = _answer(stdout, marker)
        if answer is not None:  # complete before the hang (a driver that hangs as the process exits)
            log.warning("probe %s gave its answer but did not exit within %g s; killed", script, timeout)
            return ProbeOutcome(answer, None, _tail(stderr), stdout=_tail(stdout, STDOUT_TAIL_CHARS))
        stuck = "" if proc.returncode is not None else f"; it survived SIGKILL (pid {proc.pid}, stuck in the kernel)"
        return ProbeOutcome(
            None,
            f"the probe did not finish within {timeout:g} s (a hung driver or server?){stuck}",
            _tail(stderr),
            timed_out=True,
            stdout=_tail(stdout, STDOUT_TAIL_CHARS),
        )
    finally:
        if not killed and proc.poll() is None:  # an exception other than the timeout: never leave the child behind
            _kill_group(proc)
            _reap(proc, script)
    err_text = _tail(stderr)
    out_text = _tail(stdout, STDOUT_TAIL_CHARS)
    answer = _answer(stdout, marker)
    if answer is None:
        if proc.returncode != 0:
            return ProbeOutcome(None, f"the probe died ({describe_exit(proc.returncode)})", err_text, stdout=out_text)
        return ProbeOutcome(None, "the probe printed no answer", err_text, stdout=out_text)
    return ProbeOutcome(answer, None, err_text, stdout=out_text)


def _answer(stdout: bytes | None, marker: str) -> dict[str, Any] | None:
    """The JSON after the last ``marker`` of ``stdout``, or None (a line cut short is not valid JSON)."""
    answer = None
    prefix = marker.encode() + b" "
    for line in (stdout or b"").splitlines():
        if line.startswith(prefix):
            try:
                answer = json.loads(line[len(prefix) :])
            except ValueError:
                answer = None
    return answer


def _drain(proc: subprocess.Popen[bytes], script: str) -> tuple[bytes | None, bytes | None]:
    """Read what a killed probe left in its pipes within :data:`PROBE_DRAIN_TIMEOUT`, close them and reap it
    (see :func:`_reap`)."""
    try:
        stdout, stderr = proc.communicate(timeout=PROBE_DRAIN_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        stdout, stderr = exc.stdout, exc.stderr
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        _reap(proc, script)
    return stdout, stderr


def _reap(proc: subprocess.Popen[bytes], script: str) -> None:
    """Wait for a killed probe for at most :data:`PROBE_REAP_TIMEOUT`: one stuck in the kernel (a wedged
    driver) does not die of SIGKILL, and waiting for it would hang the check that ran it."""
    try:
        proc.wait(timeout=PROBE_REAP_TIMEOUT)
    except subprocess.TimeoutExpired:
        log.error(
            "%s (pid %d) survived SIGKILL for %g s (stuck in the kernel: a wedged driver?); left behind",
            script, proc.pid, PROBE_REAP_TIMEOUT,
        )
        leave_behind(proc)


_left_behind: list[subprocess.Popen[bytes]] = []
_left_behind_lock = threading.Lock()


def leave_behind(proc: subprocess.Popen[bytes]) -> None:
    """Keep a killed child that has not exited yet (stuck in the kernel), to be reaped once it does by
    :func:`reap_left_behind` (run before every probe), not left a zombie."""
    with _left_behind_lock:
        _left_behind.append(proc)


def reap_left_behind() -> None:
    """Reap the children :func:`leave_behind` kept that have exited since."""
    with _left_behind_lock:
        _left_behind[:] = [p for p in _left_behind if p.poll() is None]


def kill_probe(proc: subprocess.Popen[bytes]) -> None:
    """Kill a running probe child (and its process group) from any thread; :func:`run_probe` then
    returns a failure. Does nothing once the child has been reaped."""
    if proc.returncode is None:
        _kill_group(proc)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _tail(data: bytes | None, chars: int = STDERR_TAIL_CHARS) -> str:
    text = (data or b"").decode("utf-8", "replace").strip()
    return text[-chars:]
