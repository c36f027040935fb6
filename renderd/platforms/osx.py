"""``OSXIntel64``: a macOS ``.app`` bundle. The binary to run is named by ``CFBundleExecutable`` in the
bundle's ``Contents/Info.plist``."""

from __future__ import annotations

import os
import plistlib

from renderd.platforms.base import HEADLESS_ARGS, Platform, Selection
from renderd.platforms.request import PlatformReport, PlatformRequest


def find_bundle(executable: str) -> str | None:
    """The ``.app`` directory ``executable`` names: the path itself, or ``executable + ".app"`` (the
    way builds are often referred to without the suffix). None when neither is a directory."""
    path = executable.rstrip("/")
    if path.endswith(".app") and os.path.isdir(path):
        return path
    if os.path.isdir(path + ".app"):
        return path + ".app"
    return None


def bundle_executable(bundle: str) -> tuple[str | None, str | None]:
    """``(path of the bundle's binary, None)`` or ``(None, reason)`` from ``Contents/Info.plist``."""
    plist_path = os.path.join(bundle, "Contents", "Info.plist")
    try:
        with open(plist_path, "rb") as f:
            info = plistlib.load(f)
    except FileNotFoundError:
        return None, f"{plist_path} does not exist; fix: point executable at a complete .app bundle"
    except (OSError, plistlib.InvalidFileException, ValueError) as exc:
        return None, f"cannot read {plist_path}: {exc}; fix: rebuild the player"
    name = info.get("CFBundleExecutable") if isinstance(info, dict) else None
    if not isinstance(name, str) or not name:
        return None, f"{plist_path} has no CFBundleExecutable; fix: rebuild the player"
    binary = os.path.join(bundle, "Contents", "MacOS", name)
    if not os.path.isfile(binary):
        return None, f"the bundle's executable {binary} (CFBundleExecutable) does not exist; fix: rebuild the player"
    if not os.access(binary, os.X_OK):
        return None, f"the bundle's executable {binary} is not executable; fix: chmod +x it"
    return binary, None


class OSXIntel64(Platform):
    name = "OSXIntel64"
    instructions = "run on macOS with the player's .app bundle (executable = path/to/Player.app)"

    def check(self, request: PlatformRequest) -> PlatformReport:
        if request.system != "Darwin":
            return self.report(request, [f"OSXIntel64 players run on macOS only (this system is {request.system})"])
        if not request.executable:
            return self.report(request, [], note="no executable given to inspect")
        bundle = find_bundle(request.executable)
        if bundle is None:
            return self.report(request, [], executable=request.executable, note="not an .app bundle; run as given")
        binary, reason = bundle_executable(bundle)
        if reason:
            return self.report(request, [reason], bundle=bundle)
        return self.report(request, [], executable=binary, bundle=bundle)

    def prepare(self, request: PlatformRequest, report: PlatformReport) -> Selection:
        return Selection(
            self.name,
            env=self.base_env(),
            args=list(HEADLESS_ARGS) if request.headless else [],
            report=report,
            request=request,
            executable=report.details.get("executable"),
        )
