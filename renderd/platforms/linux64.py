"""``Linux64``: Unity's X11 player. Needs an X display with GLX and a 24-bit screen at least the size
of the player, or an Xvfb that renderd starts (a managed display)."""

from __future__ import annotations

import logging
import os
import pwd
from dataclasses import dataclass, field

from renderd.platforms import gpus as gpu_mod
from renderd.platforms import x11, xvfb
from renderd.platforms.base import HEADLESS_ARGS, Platform, Selection
from renderd.platforms.request import X_DISPLAY_MANAGED, PlatformReport, PlatformRequest

log = logging.getLogger(__name__)


@dataclass
class _Candidate:
    """A display to try: its name as given, and the screens that must all be usable."""

    name: str
    parsed: x11.DisplayName | None
    screens: list[int] | None  # None: any one screen will do (the first usable)
    reasons: list[str] = field(default_factory=list)
    chosen_screen: int | None = None


class Linux64(Platform):
    name = "Linux64"
    instructions = (
        "run an X server with GLX and a 24-bit screen at least the player's size and point DISPLAY or "
        "x_display at it, or install Xvfb (apt-get install xvfb libgl1-mesa-dri libglx-mesa0) and let "
        'renderd manage one (x_display="managed")'
    )

    def check(self, request: PlatformRequest) -> PlatformReport:
        report = self._check(request)
        # NVIDIA_VISIBLE_DEVICES in the environment's env does nothing for an X player either (as for CloudRendering).
        note = (
            gpu_mod.container_vars_note(request.env)
            if request.system == "Linux" and not request.headless
            else None
        )
        if note is not None:
            report.details["notes"] = [*report.details.get("notes", []), note]
        return report

    def _check(self, request: PlatformRequest) -> PlatformReport:
        if request.system != "Linux":
            return self.report(request, [f"Linux64 players run on Linux only (this system is {request.system})"])
        if request.headless:
            return self.report(request, [], note="headless: no display needed")
        env = request.environ()
        xvfb_path = xvfb.find_xvfb(env)
        if request.x_display == X_DISPLAY_MANAGED:
            if xvfb_path is None:
                return self.report(
                    request,
                    [f'x_display="managed" needs Xvfb, which is not installed; fix: {xvfb.INSTALL_HINT}'],
                    managed=True,
                )
            problem = xvfb.socket_dir_problem()
            if problem is not None:
                return self.report(
                    request, [f'x_display="managed" cannot start Xvfb: {problem}'], instructions="", managed=True
                )
            return self._managed_report(request, xvfb_path, [])

        cuda, nvidia_problem = gpu_mod.nvidia_survey(env) if request.gpus else ([], None)
        plan = gpu_mod.plan_screens(
            request.gpus, env.get("CUDA_VISIBLE_DEVICES"), cuda, device_order=env.get("CUDA_DEVICE_ORDER")
        )
        if nvidia_problem is not None:
            plan.notes.insert(0, f"{nvidia_problem}; gpus are taken as X screen numbers")
        if plan.reasons:  # the GPUs asked for: each reason says what to do, nothing is to be installed
            return self.report(request, plan.reasons, instructions="", notes=plan.notes)
        wanted = plan.slots or None

        notes = list(plan.notes)
        passed_managed: list[str] = []
        passed_foreign: list[str] = []
        # A DISPLAY set in the request's own env (not inherited) names the display as x_display does: the
        # player gets a screen of it or nothing, never another display found around it.
        named = None if request.display_given else (request.env or {}).get("DISPLAY")
        explicit = request.display_given or bool(named)
        if explicit:
            source = f"x_display={request.x_display!r}" if request.display_given else f"DISPLAY={named!r} in env"
            candidate = self._candidate(request.x_display or "" if request.display_given else str(named), wanted)
            conflict = self._screen_conflict(candidate, source, request.gpus)
            if conflict is not None:
                return self.report(request, [conflict], instructions="", notes=plan.notes)
            candidates = [candidate]
        else:
            names = []
            if env.get("DISPLAY"):  # named explicitly: used even if it is a display renderd manages
                names.append(env["DISPLAY"])
            for name in x11.socket_displays():
                if name in names:
                    continue
                # Never adopt a display renderd manages (this process's, another launch's or another
                # daemon's): it stops when its owner releases it, and nothing here holds a reference.
                parsed = x11.parse_display_name(name)
                listener = xvfb.display_listener(parsed.number) if parsed is not None else None
                if listener is not None and listener[0] and xvfb.is_managed_xvfb(listener[0]):
                    passed_managed.append(name)
                    continue
                # Nor one another user runs (a lab server's Xvfb someone started by hand): it stops when they
                # stop it, under players it never knew. root's server (a GPU machine's Xorg) is everyone's.
                if listener is not None and listener[1] not in (os.geteuid(), 0):
                    passed_foreign.append(f"{name} ({_user_name(listener[1])})")
                    continue
                names.append(name)
            candidates = [self._candidate(n, wanted) for n in names]
        passed_notes = []
        if passed_managed:
            passed_notes.append(
                f"passed over {', '.join(passed_managed)}: Xvfb managed by renderd for someone else (it stops "
                'when its owner releases it; managed displays are shared only through x_display="managed")'
            )
        if passed_foreign:
            passed_notes.append(
                f"passed over {', '.join(passed_foreign)}: an X server another user runs (it stops when that user "
                "stops it); name it in x_display or DISPLAY to use it all the same"
            )
        if passed_notes:
            notes += passed_notes

        probed = [c for c in candidates if c.parsed is not None]
        # One child per display, concurrently: a frozen server fails only itself, and the first usable
        # candidate (in order of preference) is taken without waiting for the others.
        with x11.DisplayProbes([c.parsed.base for c in probed], env) as probes:
            for candidate in candidates:
                if candidate.parsed is not None:
                    self._judge(candidate, probes.result(candidate.parsed.base), request)
                if not candidate.reasons:
                    display = (
                        candidate.parsed.with_screen(candidate.chosen_screen)
                        if candidate.chosen_screen is not None
                        else candidate.parsed.base
                    )
                    return self.report(
                        request,
                        [],
                        display=display,
                        display_base=candidate.parsed.base,
                        screens=wanted or [],
                        gpu_slots=plan.labels,
                        managed=False,
                        notes=notes,
                    )

        reasons = [r for c in candidates for r in c.reasons]
        if xvfb_path is not None:  # (the fixes that would install it: say it is there and how to use it)
            reasons = [r.replace(x11.MANAGED_FIX, x11.managed_fix(xvfb_path)) for r in reasons]
        if not candidates:
            others = (
                " other than renderd's managed displays" if passed_managed and not passed_foreign
                else " other than other users' X servers" if passed_foreign and not passed_managed
                else " other than renderd's managed displays and other users' X servers" if passed_foreign
                else ""
            )
            reasons.append(
                f"no X display found: DISPLAY is not set and {x11.X11_SOCKET_DIR} has no sockets{others}; fix: "
                f"{x11.managed_fix(xvfb_path)}, or start an X server and set DISPLAY"
            )
        problem = xvfb.socket_dir_problem() if xvfb_path is not None and not explicit else None
        if explicit or xvfb_path is None or problem is not None:
            if xvfb_path is None and not explicit:
                reasons.append(
                    f"no managed display is possible either: Xvfb is not installed; fix: {xvfb.INSTALL_HINT}"
                )
            if problem is not None:
                reasons.append(f"no managed display is possible either: {problem}")
            instructions = None
            if problem is not None:  # (a managed display cannot start until the socket directory is fixed)
                instructions = (
                    "run an X server with GLX and a 24-bit screen at least the player's size and point DISPLAY "
                    "or x_display at it"
                )
            elif xvfb_path is not None:  # (installing it is no fix: it is there)
                instructions = (
                    "run an X server with GLX and a 24-bit screen at least the player's size and point DISPLAY "
                    f'or x_display at it, or let renderd manage one (x_display="managed"; Xvfb is installed: '
                    f"{xvfb_path})"
                )
            return self.report(request, reasons, instructions=instructions, managed=False, notes=notes)
        # Discovery found nothing usable, but renderd can start a display itself.
        return self._managed_report(request, xvfb_path, reasons, notes=passed_notes)

    def _managed_report(
        self, request: PlatformRequest, xvfb_path: str, passed_over: list[str], notes: list[str] | None = None
    ) -> PlatformReport:
        details = {
            "display": "managed",
            "managed": True,
            "xvfb": xvfb_path,
            "note": f"renderd will start Xvfb with a {request.width}x{request.height}x24 screen and GLX",
        }
        if passed_over:
            details["passed_over"] = passed_over
        notes = list(notes or [])
        if request.gpus:
            notes.append("gpus is ignored on a managed display: Xvfb renders on the CPU")
        if notes:
            details["notes"] = notes
        return self.report(request, [], **details)

    @staticmethod
    def _candidate(name: str, wanted: list[int] | None) -> _Candidate:
        parsed = x11.parse_display_name(name)
        if parsed is None:
            return _Candidate(
                name,
                None,
                wanted,
                [f"{x11.display_name_problem(name)}; fix: use such a name, or {x11.MANAGED_FIX}"],
            )
        screens = wanted if wanted is not None else ([parsed.screen] if parsed.screen is not None else None)
        return _Candidate(name, parsed, screens)

    @staticmethod
    def _screen_conflict(candidate: _Candidate, source: str, gpus: tuple[int, ...]) -> str | None:
        """Why an explicitly named screen (``:1.1``) and ``gpus`` disagree, or None. ``gpus`` choose each
        instance's screen on a display (see :func:`renderd.platforms.gpus.plan_screens`); a name with another
        screen in it would be silently overridden."""
        parsed = candidate.parsed
        if parsed is None or parsed.screen is None or candidate.screens is None:
            return None
        others = sorted(set(candidate.screens) - {parsed.screen})
        if not others:
            return None
        listed = ", ".join(str(s) for s in sorted(set(candidate.screens)))
        return (
            f"{source} names screen {parsed.screen}, but gpus={list(gpus)} put players on screen(s) {listed} of "
            f"{parsed.base} (one screen per GPU); fix: name the display without a screen ({parsed.base!r}) to "
            f"spread players over its screens by GPU, or leave gpus out to render on screen {parsed.screen}"
        )

    @staticmethod
    def _judge(candidate: _Candidate, found: x11.DisplayFacts, request: PlatformRequest) -> None:
        if candidate.screens is not None:
            if not found.ok:  # the display itself: one reason, whose fix has a server with every screen wanted
                candidate.reasons += x11.screen_reasons(
                    found, max(candidate.screens, default=0), request.width, request.height
                )
            else:
                for screen in candidate.screens:
                    for reason in x11.screen_reasons(found, screen, request.width, request.height):
                        if reason not in candidate.reasons:  # (one about the display, as no GLX, comes once)
                            candidate.reasons.append(reason)
            if candidate.screens and len(candidate.screens) == 1:
                candidate.chosen_screen = candidate.screens[0]
            return
        # Any screen will do: take the first usable one, else report screen 0's problems.
        for screen in range(max(found.screen_count, 1)):
            reasons = x11.screen_reasons(found, screen, request.width, request.height)
            if not reasons:
                candidate.chosen_screen = screen
                candidate.reasons = []
                return
            if screen == 0:
                candidate.reasons = reasons

    def prepare(self, request: PlatformRequest, report: PlatformReport) -> Selection:
        env = self.base_env()
        args = list(HEADLESS_ARGS) if request.headless else []
        if request.headless:
            return Selection(self.name, env=env, args=args, report=report, request=request)
        if report.details.get("managed"):
            display = xvfb.DisplayManager.default().acquire(request.width, request.height, env=request.environ())
            env["DISPLAY"] = display.screen_name(0)
            return Selection(self.name, env=env, args=args, report=report, request=request, display=display)
        base = report.details["display_base"]
        env["DISPLAY"] = report.details["display"]
        screens = report.details.get("screens") or []
        slots = [({"DISPLAY": f"{base}.{s}"}, []) for s in screens]
        return Selection(
            self.name,
            env=env,
            args=args,
            report=report,
            request=request,
            slots=slots,
            slot_labels=report.details.get("gpu_slots", []),
        )


def _user_name(uid: int) -> str:
    """``user alice (uid 1001)``, or ``uid 1001`` for a user this system does not name."""
    try:
        return f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"
