"""Is Vulkan usable here, and with which devices? Answered by a ctypes probe in a child process.

The probe (:mod:`renderd.platforms._vkprobe`) loads ``libvulkan.so.1``, creates an instance and lists
the physical devices with their names, types and UUIDs, in the order ``vkEnumeratePhysicalDevices``
gives them: the order Unity's ``-force-device-index`` counts in. It runs with the environment the
player will get (``VK_ICD_FILENAMES``, ``VK_DRIVER_FILES`` and implicit layers change the answer), and
results are cached per relevant environment and state of the installed drivers for
:data:`VULKAN_PROBE_CACHE_SECONDS` (all but a probe that missed its deadline).
"""

from __future__ import annotations

import errno
import fnmatch
import json
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from renderd.errors import describe_exit
from renderd.platforms.probe import ProbeOutcome, run_probe

log = logging.getLogger(__name__)

#: Deadline for the probe child (a software driver initialises in well under a second).
VULKAN_PROBE_TIMEOUT = 20.0
#: How long a probe result is reused for the same environment.
VULKAN_PROBE_CACHE_SECONDS = 300.0
#: Most probe results kept (one per loader environment and state of the drivers on disk); expired ones are
#: dropped first, then the oldest.
VULKAN_PROBE_CACHE_ENTRIES = 32
#: Environment variables that change what the Vulkan loader finds (prefixes): VK_DRIVER_FILES,
#: VK_ADD_DRIVER_FILES, VK_ICD_FILENAMES, VK_LAYER_PATH ..., the XDG search directories, drivers' own
#: switches and the libraries loaded.
VULKAN_ENV_PREFIXES = (
    "VK_", "MESA_", "LD_LIBRARY_PATH", "LD_PRELOAD", "__NV", "NVIDIA_", "DISPLAY", "WAYLAND_DISPLAY", "XDG_",
)
#: Variables matched exactly: the loader searches ``$HOME/.local/share/vulkan`` (and ``$HOME/.config``)
#: when the XDG home variables are unset.
VULKAN_ENV_VARS = ("HOME",)
#: Environment variables that name ICD manifest files, in the loader's order of precedence:
#: VK_DRIVER_FILES replaces the deprecated VK_ICD_FILENAMES (ignored when both are set), and
#: VK_ADD_DRIVER_FILES is used only when neither is set.
ICD_ENV_VARS = ("VK_DRIVER_FILES", "VK_ICD_FILENAMES", "VK_ADD_DRIVER_FILES")

INSTALL_HINT = (
    "install the Vulkan loader and a driver: apt-get install libvulkan1 mesa-vulkan-drivers "
    "(the NVIDIA driver ships its own ICD; in containers use the NVIDIA Container Toolkit with "
    "NVIDIA_DRIVER_CAPABILITIES=graphics,utility,compute)"
)

LOADER_FIX = (
    "install the Vulkan loader: apt-get install libvulkan1 (and a driver: mesa-vulkan-drivers or the NVIDIA driver)"
)
DRIVER_FIX = (
    "install a Vulkan driver: apt-get install mesa-vulkan-drivers (lavapipe, on the CPU) or the NVIDIA driver "
    "with its Vulkan ICD (in containers: NVIDIA_DRIVER_CAPABILITIES must include graphics)"
)
DRIVER_BROKEN_FIX = "check the driver with `vulkaninfo --summary`; reinstall or update it"
BROKEN_MANIFEST_FIX = (
    "install the driver library each manifest names (for NVIDIA: the driver's user-space libraries, of the "
    "kernel module's version; in containers NVIDIA_DRIVER_CAPABILITIES must include graphics), or remove the "
    "stale manifest"
)

_PROBE_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_vkprobe.py")
_PROBE_MARKER = "RENDERD-VULKAN-PROBE"
_PROBE_STAGE_MARKER = "RENDERD-VULKAN-STAGE"


@dataclass(frozen=True)
class VulkanDevice:
    """A physical device as Vulkan enumerates it (``index`` is what ``-force-device-index`` takes)."""

    index: int
    name: str
    type: str = "OTHER"
    uuid: str | None = None

    def describe(self) -> str:
        return f"{self.index}: {self.name} [{self.type}]"


@dataclass
class VulkanProbe:
    """The probe's result: ``devices`` when ``ok``; otherwise ``error`` says what failed."""

    ok: bool
    devices: list[VulkanDevice] = field(default_factory=list)
    error: str = ""
    fix: str = ""
    api_version: str = ""
    raw: dict[str, Any] = field(default_factory=dict)
    #: Driver manifests the loader read whose library cannot be loaded (one sentence each), found when
    #: no instance could be made or only CPU devices were listed: a GPU driver installed but broken.
    broken_drivers: list[str] = field(default_factory=list)
    #: What else went wrong but did not spoil the answer: the driver hung or crashed in its teardown
    #: (``vkDestroyInstance``, or as the probe exited) after the probe had printed its complete answer.
    notes: list[str] = field(default_factory=list)


_cache: dict[tuple[object, ...], tuple[float, VulkanProbe]] = {}
_cache_lock = threading.Lock()
#: Counts :func:`clear_cache` calls: a probe that began before one (a driver fixed, then the daemon reloaded) answers
#: its caller but is not cached (it describes the drivers as they were before).
_cache_generation = 0

#: The dynamic linker's cache: rewritten (ldconfig) when a package installs or removes a shared library, such
#: as the Vulkan loader or a driver.
LD_SO_CACHE = "/etc/ld.so.cache"


def loader_env_key(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The part of ``env`` that can change what the Vulkan loader finds (the key of the probe caches)."""
    return tuple(
        sorted((k, v) for k, v in env.items() if k.startswith(VULKAN_ENV_PREFIXES) or k in VULKAN_ENV_VARS)
    )


def _icd_search_dirs(env: Mapping[str, str]) -> list[str]:
    """The directories the loader searches for ICD manifests when no variable names them (Linux), in its
    order: the XDG configuration directories (home first), /etc, then the XDG data directories (home first)."""
    home = env.get("HOME", "")
    config_home = env.get("XDG_CONFIG_HOME") or (os.path.join(home, ".config") if home else "")
    data_home = env.get("XDG_DATA_HOME") or (os.path.join(home, ".local", "share") if home else "")
    config_dirs = (env.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(os.pathsep)
    data_dirs = (env.get("XDG_DATA_DIRS") or "/usr/local/share:/usr/share").split(os.pathsep)
    bases = [config_home, *config_dirs, "/etc", data_home, *data_dirs]
    return [os.path.join(base, "vulkan", "icd.d") for base in bases if base]


def driver_fingerprint(env: Mapping[str, str]) -> tuple[tuple[str, tuple[int, int, int] | None], ...]:
    """What the Vulkan drivers the loader would find look like on disk now: the identity, size and change
    time of each manifest file or directory the ICD variables name, of each directory the loader searches,
    and of the dynamic linker's cache (see :data:`LD_SO_CACHE`). A manifest or driver installed, changed or
    removed changes it (part of the probe cache's key): the next check probes again."""
    paths = [p for var in ICD_ENV_VARS for p in env.get(var, "").split(os.pathsep) if p]
    paths += _icd_search_dirs(env)
    paths.append(LD_SO_CACHE)
    found = []
    for path in paths:
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            found.append((path, None))
        else:
            found.append((path, (st.st_ino, st.st_size, st.st_mtime_ns)))
    return tuple(found)


def _manifest_files(value: str) -> list[str]:
    """The manifest files a path list names (a directory stands for the ``.json`` files in it)."""
    files = []
    for path in value.split(os.pathsep):
        if not path:
            continue
        if os.path.isdir(path):
            try:
                files += [os.path.join(path, e) for e in sorted(os.listdir(path)) if e.endswith(".json")]
            except OSError:
                continue
        else:
            files.append(path)
    return files


def loader_manifests(env: Mapping[str, str]) -> list[str]:
    """The ICD manifest files the loader reads with ``env``: those VK_DRIVER_FILES names, else those
    VK_ICD_FILENAMES names, else those in its search directories and VK_ADD_DRIVER_FILES (driver filters aside)."""
    for var in ICD_ENV_VARS[:2]:
        value = env.get(var)
        if value is not None:
            return list(dict.fromkeys(_manifest_files(value)))
    found = []
    for directory in _icd_search_dirs(env):
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        found += [os.path.join(directory, n) for n in names if n.endswith(".json")]
    found += _manifest_files(env.get("VK_ADD_DRIVER_FILES", ""))
    return list(dict.fromkeys(found))


def _manifest_library(path: str) -> str | None:
    """The driver library an ICD manifest names, as the loader opens it (a path relative to the manifest's
    directory made absolute; a bare name left to the dynamic linker), or None when it names none."""
    try:
        with open(path, "rb") as f:
            manifest = json.loads(f.read(MANIFEST_READ_LIMIT))
    except (OSError, ValueError):
        return None
    icd = manifest.get("ICD") if isinstance(manifest, dict) else None
    library = icd.get("library_path") if isinstance(icd, dict) else None
    if not isinstance(library, str) or not library:
        return None
    if "/" not in library:
        return library
    return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(path)), library))


#: Where the probe was when it hung or died (the last ``RENDERD-VULKAN-STAGE`` it printed), for people.
_STAGES = {
    "loader": "while loading the Vulkan loader (libvulkan.so.1)",
    "vkCreateInstance": "in vkCreateInstance, where the loader loads and starts every driver",
    "vkEnumeratePhysicalDevices": "in vkEnumeratePhysicalDevices, where the drivers look for their devices "
    "(a GPU that does not answer?)",
    "device-properties": "reading the properties of Vulkan device",
    "vkDestroyInstance": "in vkDestroyInstance, after the devices were listed",
    "exit": "as the probe exited (unloading the drivers), after the devices were listed",
    "dlopen-drivers": "opening the driver libraries one by one, after the loader found no usable GPU driver",
}


def _last_stage(stdout: str) -> str:
    """The last step the probe announced (``RENDERD-VULKAN-STAGE <step>``), or ``""``."""
    stage = ""
    for line in stdout.splitlines():
        if line.startswith(_PROBE_STAGE_MARKER + " "):
            stage = line[len(_PROBE_STAGE_MARKER) + 1 :].strip()
    return stage


def _where(stdout: str, manifests: list[str]) -> str:
    """Where the probe got to, from its progress lines: `` in vkCreateInstance, ... (driver manifests: ...)``."""
    stage = _last_stage(stdout)
    if not stage:
        return " before it loaded the Vulkan loader (the Python interpreter did not start?)"
    name, _, arg = stage.partition(" ")
    text = " " + _STAGES.get(name, f"at {name}") + (f" {arg}" if arg else "")
    if name in ("vkCreateInstance", "vkEnumeratePhysicalDevices", "dlopen-drivers"):
        text += f" (driver manifests: {', '.join(manifests)})" if manifests else " (no driver manifest found)"
    return text


#: Failures to start the probe that say this process is short of something now, not what Vulkan is.
_RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN})


def clear_cache() -> None:
    """Forget every cached probe result (the next :func:`probe_vulkan` runs the probe again); a probe under way
    meanwhile answers its caller but is not cached."""
    global _cache_generation
    with _cache_lock:
        _cache_generation += 1
        _cache.clear()


def probe_vulkan(
    env: Mapping[str, str], *, timeout: float = VULKAN_PROBE_TIMEOUT, use_cache: bool = True
) -> VulkanProbe:
    """Probe Vulkan with ``env`` (the player's environment). Never raises for the driver's problems:
    a missing loader, a failing ``vkCreateInstance``, a crash or a hang are reported in ``error``.

    A result is reused for the same loader environment (:func:`loader_env_key`) while the drivers on disk do
    not change (:func:`driver_fingerprint`), for at most :data:`VULKAN_PROBE_CACHE_SECONDS`."""
    key = (loader_env_key(env), driver_fingerprint(env))
    now = time.monotonic()
    with _cache_lock:
        generation = _cache_generation
        if use_cache:
            cached = _cache.get(key)
            if cached is not None and now - cached[0] < VULKAN_PROBE_CACHE_SECONDS:
                return cached[1]
    result, cacheable = _run(env, timeout)
    if cacheable:
        with _cache_lock:
            if generation != _cache_generation:  # (cleared while it ran: see clear_cache)
                return result
            now = time.monotonic()
            for old in [k for k, (at, _) in _cache.items() if now - at >= VULKAN_PROBE_CACHE_SECONDS]:
                del _cache[old]
            _cache.pop(key, None)  # (re)inserted last: the dict's order is the entries' age
            _cache[key] = (now, result)
            while len(_cache) > VULKAN_PROBE_CACHE_ENTRIES:
                del _cache[next(iter(_cache))]
    return result


def _run(env: Mapping[str, str], timeout: float) -> tuple[VulkanProbe, bool]:
    """The probe's result, and whether it may be cached: a missed deadline (a driver slow once, a loaded
    machine) is not, so the next check probes again."""
    manifests = loader_manifests(env)
    libraries = {m: lib for m in manifests if (lib := _manifest_library(m))}
    started: list[subprocess.Popen[bytes]] = []
    begun = time.monotonic()
    try:
        outcome = run_probe(
            _PROBE_SCRIPT,
            sorted(set(libraries.values())),
            marker=_PROBE_MARKER,
            env=env,
            timeout=timeout,
            isolated=True,
            on_start=started.append,
        )
    except OSError as exc:
        if exc.errno in _RESOURCE_ERRNOS:
            # This process is short of descriptors, memory or processes now: nothing is known of Vulkan, and
            # the next check, perhaps with more to spare, must probe again.
            return VulkanProbe(
                False, error=f"cannot run the Vulkan probe: {exc}",
                fix="raise this process's limits (open files: ulimit -n / LimitNOFILE=; processes) or free memory",
            ), False
        return VulkanProbe(False, error=f"cannot run the Vulkan probe: {exc}", fix="check the Python installation"), True
    if outcome.answer is None:
        error = f"the Vulkan driver broke the probe{_where(outcome.stdout, manifests)}: {outcome.failure}"
        if outcome.stderr:
            error += f" (it said: {outcome.stderr.splitlines()[-1]})"
        return VulkanProbe(False, error=error, fix=DRIVER_BROKEN_FIX), not outcome.timed_out
    answer = outcome.answer
    notes = []
    if started and started[0].returncode != 0:  # the answer was complete; the driver's teardown was not
        notes.append(_teardown_note(outcome, started[0].returncode, time.monotonic() - begun >= timeout, timeout))
        log.warning("Vulkan probe: %s", notes[-1])
    unloadable = answer.get("unloadable") if isinstance(answer.get("unloadable"), dict) else {}
    broken = [
        _manifest_problem(m) or f"{m} names the driver library {lib}, which cannot be loaded ({unloadable[lib]})"
        for m, lib in libraries.items()
        if lib in unloadable
    ]
    if not answer.get("ok"):
        stage = answer.get("stage")
        error = str(answer.get("error", "unknown failure"))
        if stage == "loader":
            fix = LOADER_FIX
        elif stage == "vkCreateInstance":
            hint, fix = _icd_hint(env, broken)
            error += hint
        else:
            fix = DRIVER_BROKEN_FIX
        return VulkanProbe(
            False, error=error, fix=fix, api_version=str(answer.get("api_version", "")), raw=answer, notes=notes
        ), True
    devices = [
        VulkanDevice(int(d["index"]), str(d["name"]), str(d.get("type", "OTHER")), d.get("uuid"))
        for d in answer.get("devices", [])
    ]
    result = VulkanProbe(
        True, devices, api_version=str(answer.get("api_version", "")), raw=answer, broken_drivers=broken, notes=notes
    )
    if broken:
        log.warning("Vulkan drivers that cannot be loaded: %s", "; ".join(broken))
    if not devices:
        result.fix = DRIVER_FIX
    log.debug("Vulkan probe: %s", ", ".join(d.describe() for d in devices) or "no devices")
    return result, True


def _teardown_note(outcome: ProbeOutcome, returncode: int | None, deadline_passed: bool, timeout: float) -> str:
    """Why a probe that printed its complete answer did not exit cleanly: where the driver's teardown hung
    (killed at the deadline, or stuck past SIGKILL) or crashed (``returncode``)."""
    name = _last_stage(outcome.stdout)
    where = _STAGES.get(name, f"at {name}") if name in ("vkDestroyInstance", "exit") else "after the answer"
    if returncode is None or (returncode == -signal.SIGKILL and deadline_passed):
        what = f"hung {where} (the probe was killed at its {timeout:g} s deadline)"
    else:
        what = f"crashed {where} ({describe_exit(returncode)})"
    return (
        f"the Vulkan driver {what}; the device list it gave before is used; fix: {DRIVER_BROKEN_FIX} (players "
        "may hang or crash as they exit too)"
    )


def _icd_hint(env: Mapping[str, str], unloadable: list[str] = ()) -> tuple[str, str]:
    """(what the environment says about ICD manifests, the fix) for a failing vkCreateInstance. Names the
    variable the loader actually used (see :data:`ICD_ENV_VARS`). ``unloadable``: the manifests whose driver
    library the probe could not open (one sentence each).

    A VK_DRIVER_FILES or VK_ICD_FILENAMES that is set but names no file (empty, as ``VAR=`` or an unset
    variable in a unit file leaves it, or only separators) is still used by the loader: it loads no driver
    at all (libvulkan1 1.3.239: "Found no drivers!", the installed ones hidden). An empty VK_ADD_DRIVER_FILES
    adds nothing and hides nothing.
    """
    for var in ICD_ENV_VARS:
        value = env.get(var)
        if value is None or (not value and var == "VK_ADD_DRIVER_FILES"):
            continue
        ignored = [v for v in ICD_ENV_VARS if v != var and env.get(v)]  # all below ``var``: the loader skips them
        note = f"; {' and '.join(ignored)} {'is' if len(ignored) == 1 else 'are'} ignored while {var} is set"
        note = note if ignored else ""
        if not any(value.split(os.pathsep)):
            what = "set but empty" if value == "" else f"set to {value!r}, which names no file"
            hint = f" (no Vulkan driver found: {var} is {what}, so the loader loads none of the installed drivers"
            hint += f"{note})"
            fix = (
                f"unset {var} (naming no file, it hides every installed driver) or point it at an existing ICD "
                "manifest (see /usr/share/vulkan/icd.d/)"
            )
            return hint, fix
        missing = [p for p in value.split(os.pathsep) if p and not os.path.exists(p)]
        fix = f"point {var} at an existing ICD manifest (see /usr/share/vulkan/icd.d/) or unset it"
        if missing:
            listed = ", ".join(missing)
            verb = "does" if len(missing) == 1 else "do"
            return f" (no Vulkan driver found: {var}={value} names {listed}, which {verb} not exist{note})", fix
        broken = [why for p in value.split(os.pathsep) if p and (why := _manifest_problem(p))]
        broken = list(dict.fromkeys([*broken, *unloadable]))
        if broken:
            fix = f"correct or remove the manifest named, or point {var} at one in /usr/share/vulkan/icd.d/"
            return f" (no usable Vulkan driver among {var}={value}: {'; '.join(broken)}{note})", fix
        return f" (no usable Vulkan driver among {var}={value}{note})", fix
    hidden = _filter_hint(env)
    if hidden is not None:
        return hidden
    manifests = loader_manifests(env)
    broken = list(dict.fromkeys([*(why for m in manifests if (why := _manifest_problem(m))), *unloadable]))
    if broken:
        return f" (no usable Vulkan driver: {'; '.join(broken)})", BROKEN_MANIFEST_FIX
    return " (no Vulkan driver (ICD) was found)", DRIVER_FIX


#: The loader's driver filters (libvulkan1 1.3.234 and later): comma-separated globs matched against the
#: file names of the ICD manifests; a driver is kept when SELECT (if set) matches it and DISABLE does not.
DRIVER_FILTER_VARS = ("VK_LOADER_DRIVERS_SELECT", "VK_LOADER_DRIVERS_DISABLE")


def _filter_hint(env: Mapping[str, str]) -> tuple[str, str] | None:
    """(hint, fix) when the loader's driver filters hide every installed driver, else None."""
    set_vars = [v for v in DRIVER_FILTER_VARS if env.get(v)]
    installed = _installed_manifests(env)
    if not set_vars or not installed:
        return None

    def matches(name: str, globs: str) -> bool:
        return any(fnmatch.fnmatch(name.lower(), g.strip().lower()) for g in globs.split(",") if g.strip())

    select, disable = (env.get(v) for v in DRIVER_FILTER_VARS)
    kept = [n for n in installed if (not select or matches(n, select)) and not (disable and matches(n, disable))]
    if kept:
        return None
    named = " and ".join(f"{v}={env[v]!r}" for v in set_vars)
    verb = "hides" if len(set_vars) == 1 else "hide"
    hint = f" (no Vulkan driver found: {named} {verb} every installed driver: {', '.join(installed)})"
    fix = (
        f"unset {' and '.join(set_vars)}, or make it match the file name of an installed driver's manifest "
        "(see /usr/share/vulkan/icd.d/)"
    )
    return hint, fix


def _installed_manifests(env: Mapping[str, str]) -> list[str]:
    """The file names of the ICD manifests in the loader's system search directories."""
    config_dirs = (env.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(os.pathsep) + ["/etc"]
    data_dirs = (env.get("XDG_DATA_DIRS") or "/usr/local/share:/usr/share").split(os.pathsep)
    names: list[str] = []
    for base in [*config_dirs, *data_dirs]:
        if not base:
            continue
        try:
            entries = sorted(os.listdir(os.path.join(base, "vulkan", "icd.d")))
        except OSError:
            continue
        names += [e for e in entries if e.endswith(".json") and e not in names]
    return names


#: The most of an ICD manifest read to check it (a real one is a few hundred bytes).
MANIFEST_READ_LIMIT = 1 << 20


def _manifest_problem(path: str) -> str | None:
    """Why the ICD manifest file ``path`` cannot give the loader a driver, or None (also for a directory or
    anything not a regular file, which is not checked). The loader answers a manifest that is not JSON with
    VK_ERROR_OUT_OF_HOST_MEMORY (even when another, good one is listed) and one whose library is missing with
    VK_ERROR_INCOMPATIBLE_DRIVER: neither names the file."""
    if not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as f:
            data = f.read(MANIFEST_READ_LIMIT)
    except OSError as exc:
        return f"{path} cannot be read ({exc.strerror or exc})"
    try:
        manifest = json.loads(data)
    except ValueError as exc:
        return f"{path} is not valid JSON ({exc}), which the loader reports as VK_ERROR_OUT_OF_HOST_MEMORY"
    icd = manifest.get("ICD") if isinstance(manifest, dict) else None
    library = icd.get("library_path") if isinstance(icd, dict) else None
    if not isinstance(library, str) or not library:
        return f"{path} has no ICD.library_path"
    if "/" not in library:
        return None  # a bare name: the dynamic linker searches for it
    resolved = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(path)), library))
    if not os.path.exists(resolved):
        return f"{path} names the driver library {resolved}, which does not exist"
    return None
