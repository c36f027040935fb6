"""Holding a thread at one line of renderd's code, to place another thread's action exactly there (a close() as a
step is about to poll, say): a trace function for :func:`sys.settrace` in the thread to hold."""

from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Callable
from types import CodeType
from typing import Any


def pause_at(code: CodeType, owner: Any, lineno: int, reached: threading.Event, release: threading.Event):
    """A trace function that holds the thread setting it at line ``lineno`` of ``code`` (run with ``self`` being
    ``owner``), the first time it gets there: it sets ``reached`` and waits for ``release`` (at most 30 s)."""

    def trace(frame, event, arg):
        if frame.f_code is not code or frame.f_locals.get("self") is not owner:
            return None

        def line(frame, event, arg):
            if event == "line" and frame.f_lineno == lineno and not reached.is_set():
                reached.set()
                assert release.wait(30), "the test never let the thread go on"
            return line

        return line

    return trace


def line_of(func: Any, text: str) -> int:
    """The number of the line of ``func`` whose stripped source is ``text``."""
    lines, first = inspect.getsourcelines(func)
    return first + next(k for k, line in enumerate(lines) if line.strip() == text)


def traced_thread(trace: Any, call: Callable[[], Any], outcome: dict[str, object], key: str, error_key: str,
                  name: str) -> threading.Thread:
    """A thread (not started) running ``call()`` under ``trace`` (see :func:`pause_at`), which stores what it
    returns in ``outcome[key]``, or what it raises in ``outcome[error_key]``."""

    def run() -> None:
        sys.settrace(trace)
        try:
            outcome[key] = call()
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            outcome[error_key] = exc
        finally:
            sys.settrace(None)

    return threading.Thread(target=run, name=name)
