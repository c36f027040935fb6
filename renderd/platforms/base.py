"""What every platform provides (:class:`Platform`), and what a choice of platform gives the launcher
(:class:`Selection`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any, ClassVar

from renderd.platforms.request import PlatformReport, PlatformRequest

log = logging.getLogger(__name__)

#: The variable that tells the reference player which platform it runs under.
PLATFORM_ENV_VAR = "RENDERD_PLATFORM"
#: Unity's flags for "no rendering at all".
HEADLESS_ARGS = ("-batchmode", "-nographics")


class Platform:
    """A platform answers two questions: can it serve a request (:meth:`check`, no side effects), and
    what does a player launched under it need (:meth:`prepare`, which may acquire resources such as a
    managed display)."""

    #: The name users write (``platform = "Linux64"``).
    name: ClassVar[str] = ""
    #: What to install or start for this platform, in one sentence.
    instructions: ClassVar[str] = ""

    def check(self, request: PlatformRequest) -> PlatformReport:
        """Whether this platform can serve ``request``, with reasons and details. Never raises for
        what it finds on the machine; problems become reasons."""
        raise NotImplementedError

    def prepare(self, request: PlatformRequest, report: PlatformReport) -> Selection:
        """Turn a valid report into a :class:`Selection`. Raises :class:`renderd.errors.PlatformError`
        when a resource it needs cannot be had after all (a managed display that fails to start)."""
        raise NotImplementedError

    def report(
        self, request: PlatformRequest, reasons: list[str], *, instructions: str | None = None, **details: Any
    ) -> PlatformReport:
        """A report with :attr:`instructions`, or ``instructions`` given: ``""`` when the platform is installed
        and what is wrong is a setting (a variable naming no driver, a GPU index out of range), so that what to
        install is not offered as the fix (each reason carries its own)."""
        return PlatformReport(
            self.name, not reasons, reasons, self.instructions if instructions is None else instructions, details
        )

    def base_env(self) -> dict[str, str]:
        return {PLATFORM_ENV_VAR: self.name}


class Selection:
    """The platform chosen for a request, ready to launch players under.

    ``name``: the platform. ``env``: variables to add to the player's environment (always
    ``RENDERD_PLATFORM``; ``DISPLAY`` for Linux64). ``args``: extra player arguments (``-batchmode
    -nographics`` when headless; :attr:`headless` says so). ``executable``: the program to run when
    the platform resolved it (the binary inside a macOS bundle), else None. ``report``: the check that
    chose it. ``display``: the managed display held for it, if any (released by :meth:`release`).

    A context manager; :meth:`release` is idempotent and thread-safe.
    """

    def __init__(
        self,
        name: str,
        *,
        env: dict[str, str],
        args: Sequence[str] = (),
        report: PlatformReport,
        request: PlatformRequest,
        slots: Sequence[tuple[dict[str, str], Sequence[str]]] = (),
        slot_labels: Sequence[str] = (),
        executable: str | None = None,
        display: Any = None,
    ) -> None:
        self.name = name
        self.env = dict(env)
        self.args = list(args)
        self.report = report
        self.request = request
        self.executable = executable
        self.display = display
        self._slots = [(dict(e), list(a)) for e, a in slots]
        self._slot_labels = list(slot_labels)
        self._release_lock = threading.Lock()
        self._renew_lock = threading.Lock()
        self.released = False

    @property
    def headless(self) -> bool:
        """True when the player runs without rendering (``-batchmode -nographics`` is in ``args``)."""
        return all(flag in self.args for flag in HEADLESS_ARGS)

    @property
    def instances_per_cycle(self) -> int:
        """How many distinct devices instances are spread over (1 when not spreading)."""
        return max(1, len(self._slots))

    def for_instance(self, index: int) -> tuple[dict[str, str], list[str]]:
        """``(env, args)`` for player instance ``index`` (0-based), GPUs spread round-robin: instance
        ``i`` gets slot ``i % len(gpus)`` (``DISPLAY=:N.s`` for Linux64, ``-force-device-index v`` for
        CloudRendering). Without GPU spreading every instance gets ``env`` and ``args``.

        A managed display that died since the selection was made is replaced first (players restarted
        after an Xvfb crash get the new display). Raises ``ValueError`` for a negative index and
        :class:`renderd.errors.PlatformError` when a dead managed display cannot be replaced."""
        if index < 0:
            raise ValueError(f"instance index must be >= 0, got {index}")
        self._renew_display()
        env = dict(self.env)
        args = list(self.args)
        if self._slots:
            slot_env, slot_args = self._slots[index % len(self._slots)]
            env.update(slot_env)
            args.extend(slot_args)
        return env, args

    def display_dead(self) -> bool:
        """True when the managed display this selection holds has exited, so that :meth:`for_instance` would
        first start a new one (which can take seconds): callers that must not block call
        :meth:`renew_display` elsewhere first."""
        display = self.display
        return display is not None and not self.released and not display.alive()

    def renew_display(self) -> None:
        """Replace a dead managed display now (what :meth:`for_instance` does first; nothing when it runs).
        Raises :class:`renderd.errors.PlatformError` when the new one cannot be started."""
        self._renew_display()

    def _renew_display(self) -> None:
        # One replacement at a time (_renew_lock); the state lock is never held while an Xvfb starts, so
        # release() does not wait for a replacement (up to the start deadline, 15 s): the replacement
        # releases the new display itself when the selection was released meanwhile.
        with self._renew_lock:
            with self._release_lock:
                display = self.display
                if display is None or self.released or display.alive():
                    return
            log.warning("managed display %s (Xvfb pid %d) died; starting a new one", display.name, display.pid)
            fresh = display.renew(self.request.environ())
            with self._release_lock:
                if not self.released:
                    self.display = fresh
                    self.env["DISPLAY"] = fresh.screen_name(0)
                    return
            fresh.release()

    def describe_slots(self) -> list[str]:
        """One line per GPU slot: which requested GPU maps to which device or screen."""
        return list(self._slot_labels)

    def release(self) -> None:
        """Give back what the selection holds (the reference on a managed display). Idempotent. Never waits
        for a dead display being replaced (:meth:`renew_display`, another thread): that replacement gives
        back the display it started. Dropping the last reference on a managed display stops its Xvfb: SIGTERM,
        at most the stop grace (5 s), then SIGKILL."""
        with self._release_lock:
            if self.released:
                return
            self.released = True
            display = self.display
        if display is not None:
            display.release()

    def __enter__(self) -> Selection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"<Selection {self.name} env={self.env} args={self.args}>"
