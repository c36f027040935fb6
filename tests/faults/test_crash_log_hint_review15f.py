"""A player that crashes by a signal without leaving anything in its log: the PlayerCrashed message must not
point at a log "quoted below" when nothing is quoted (a shell player killed before it writes a line, a log
this process cannot read); with a log tail, it still does."""

from __future__ import annotations

import signal

import pytest

import renderd
from renderd.errors import PlayerCrashed

from .conftest import Timer

AT_ONCE = 1.5 * 5  # only catches a hang (the crash is reported within 1.5 s)


@pytest.mark.parametrize("sig", ["ABRT", "SEGV"])
def test_a_signal_crash_with_an_empty_log_does_not_promise_a_quoted_log(sig, nothing_left):
    with Timer() as t, pytest.raises(PlayerCrashed) as caught:
        renderd.launch(["/bin/sh", "-c", f"kill -{sig} $$"], platform="headless", start_timeout=10)
    assert t.elapsed < AT_ONCE
    err = caught.value
    assert err.returncode == -getattr(signal, f"SIG{sig}")
    assert err.log_tail == ""
    text = str(err)
    assert f"killed by SIG{sig}" in text, text
    assert "quoted below" not in text, text
    assert "Last lines of the player's log" not in text, text
    assert "nothing in its log to quote" in text, text


def test_a_signal_crash_with_a_log_still_points_at_the_quoted_tail(nothing_left):
    script = "echo 'about to fail: out of textures' >&2; kill -ABRT $$"
    with pytest.raises(PlayerCrashed) as caught:
        renderd.launch(["/bin/sh", "-c", script], platform="headless", start_timeout=10)
    text = str(caught.value)
    assert caught.value.log_tail, text  # (the player's stderr goes to its log)
    assert "its log (quoted below) usually says why" in text, text
    assert "  | about to fail: out of textures" in text, text


@pytest.mark.parametrize("tail", ["", "   \n", "\n\n"])
def test_the_hint_follows_what_is_quoted(tail):
    err = PlayerCrashed("the player exited", pid=1, returncode=-signal.SIGSEGV, log_tail=tail, log_path="/x/p.log")
    text = str(err)
    assert "quoted below" not in text and "Last lines" not in text, text
    assert text.endswith("nothing in its log to quote.\nPlayer log: /x/p.log"), text
    quoted = PlayerCrashed("the player exited", returncode=-signal.SIGSEGV, log_tail="boom\n")
    assert "its log (quoted below) usually says why" in str(quoted)
    assert str(quoted).endswith("Last lines of the player's log:\n  | boom")
