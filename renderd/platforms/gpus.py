"""GPU spreading: which device each player instance renders on.

An environment's ``gpus`` list names GPUs the way ``nvidia-smi`` does (PCI bus order: CUDA's with
``CUDA_DEVICE_ORDER=PCI_BUS_ID``, or when the GPUs are alike; a plan notes when they may differ); players are
spread over it round-robin. Unity picks its Vulkan device with ``-force-device-index N`` where ``N`` counts in
``vkEnumeratePhysicalDevices`` order, which need not be the ``nvidia-smi`` (PCI bus) order. The two are
joined by device UUID: ``nvidia-smi -L`` prints ``GPU-<uuid>`` and Vulkan reports the same 16 bytes as
``deviceUUID``::

    gpus = [0, 1]  --CUDA_VISIBLE_DEVICES-->  nvidia-smi index  --UUID-->  Vulkan index  --> -force-device-index

``CUDA_VISIBLE_DEVICES`` (indices or ``GPU-`` UUID prefixes) is applied first, as CUDA applies it: the
``gpus`` entries index the visible list, and an invalid entry ends the list. Everything here that
parses is pure (text in, data out) and tested on recorded outputs.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from renderd.errors import describe_exit
from renderd.platforms.probe import leave_behind, reap_left_behind
from renderd.platforms.vulkan import VulkanDevice, driver_fingerprint, loader_env_key
from renderd.process import die_with_parent

log = logging.getLogger(__name__)

#: Deadline for ``nvidia-smi -L`` and ``vulkaninfo --summary``.
GPU_TOOL_TIMEOUT = 10.0
#: Seconds to read what a timed-out tool left in its pipes once its process group is killed.
GPU_TOOL_DRAIN_TIMEOUT = 1.0
#: Seconds to wait for the kernel to reap a killed tool: one in uninterruptible sleep in a wedged driver (an
#: nvidia-smi on a GPU that fell off the bus) does not die of SIGKILL; it is left behind, logged.
GPU_TOOL_REAP_TIMEOUT = 5.0
#: How long the output of ``nvidia-smi -L`` is reused.
GPU_TOOL_CACHE_SECONDS = 300.0
#: Most tool outputs kept (one per command and environment); expired ones are dropped first, then the oldest.
GPU_TOOL_CACHE_ENTRIES = 32
#: How long a tool's failure (an error exit, a missed deadline) is reused once it failed twice in a row: a broken
#: tool (an ``nvidia-smi`` that hangs until its deadline) then costs one run per this many seconds, not one per
#: check, and a tool fixed since is asked again at most this long after. The first failure is not reused (a tool
#: slow once, a driver initialising, is asked again at the next check). A reload of the daemon forgets them all.
GPU_TOOL_FAILURE_CACHE_SECONDS = 30.0
#: How long a failure is remembered to count the next one as "in a row" (a failure after a longer while is a first).
GPU_TOOL_FAILURE_MEMORY_SECONDS = 300.0

_NVIDIA_SMI_RE = re.compile(r"^GPU (?P<index>\d+): (?P<name>.+?) \(UUID: (?P<uuid>GPU-[0-9A-Fa-f-]+)\)\s*$")
_VK_GPU_RE = re.compile(r"^\s*GPU(?P<index>\d+):\s*$")
_VK_GPU_ID_RE = re.compile(r"^\s*GPU id\s*[:=]\s*(?P<index>\d+)\s*\((?P<name>.*)\)")
_VK_FIELD_RE = re.compile(r"^\s*(?P<key>deviceName|deviceUUID|deviceType)\s*=\s*(?P<value>.+?)\s*$")


@dataclass(frozen=True)
class CudaDevice:
    """A GPU as ``nvidia-smi -L`` lists it (``index`` in PCI bus order, ``uuid`` without ``GPU-``)."""

    index: int
    name: str
    uuid: str


def normalize_uuid(value: str) -> str:
    """Lower-case hex digits only: ``GPU-5D5B-...`` and ``5d5b...`` compare equal."""
    text = value.strip().lower()
    for prefix in ("gpu-", "mig-"):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    return re.sub(r"[^0-9a-f]", "", text)


def parse_nvidia_smi(text: str) -> list[CudaDevice]:
    """Parse ``nvidia-smi -L``. MIG lines (indented ``MIG ...``) are skipped: they have no Vulkan device."""
    devices = []
    for line in text.splitlines():
        match = _NVIDIA_SMI_RE.match(line)
        if match:
            devices.append(CudaDevice(int(match["index"]), match["name"], normalize_uuid(match["uuid"])))
    return devices


def parse_vulkaninfo(text: str) -> list[VulkanDevice]:
    """Parse ``vulkaninfo`` (the default text output or ``--summary``) into devices in Vulkan order.

    A device starts at a ``GPU<n>:`` line (or ``GPU id : n (name)``); its first ``deviceName``,
    ``deviceType`` and ``deviceUUID`` lines are taken.
    """
    found: dict[int, dict[str, str]] = {}
    current: int | None = None
    for line in text.splitlines():
        header = _VK_GPU_RE.match(line)
        if header:
            current = int(header["index"])
            found.setdefault(current, {})
            continue
        header = _VK_GPU_ID_RE.match(line)
        if header:
            current = int(header["index"])
            found.setdefault(current, {}).setdefault("fallback_name", header["name"].strip())
            continue
        if current is None:
            continue
        fields = _VK_FIELD_RE.match(line)
        if fields:
            found[current].setdefault(fields["key"], fields["value"])
    devices = []
    for index in sorted(found):
        info = found[index]
        name = info.get("deviceName") or info.get("fallback_name") or f"GPU{index}"
        kind = info.get("deviceType", "OTHER").split()[0].removeprefix("PHYSICAL_DEVICE_TYPE_")
        uuid = info.get("deviceUUID")
        devices.append(VulkanDevice(index, name, kind, _dashed(normalize_uuid(uuid)) if uuid else None))
    return devices


def _dashed(hex32: str) -> str:
    if len(hex32) != 32:
        return hex32
    return f"{hex32[0:8]}-{hex32[8:12]}-{hex32[12:16]}-{hex32[16:20]}-{hex32[20:32]}"


def apply_cuda_visible_devices(devices: Sequence[CudaDevice], value: str | None) -> tuple[list[CudaDevice], list[str]]:
    """The devices CUDA would expose under ``CUDA_VISIBLE_DEVICES=value``, in its order, and notes.

    ``None`` (unset) exposes every device. Entries are indices into ``devices`` or ``GPU-`` UUIDs (a
    unique prefix is enough). As in CUDA, the first invalid entry (unknown index, ambiguous or unknown
    UUID, ``MIG-`` which has no Vulkan device, a repeated device) ends the list; a note says so.
    """
    if value is None:
        return list(devices), []
    visible: list[CudaDevice] = []
    notes: list[str] = []
    for raw in value.split(","):
        entry = raw.strip()
        device = _lookup(devices, entry)
        if isinstance(device, str):
            notes.append(
                f"CUDA_VISIBLE_DEVICES={value!r}: {device}; entries from {entry!r} on are ignored, as CUDA does"
            )
            break
        if device in visible:
            notes.append(f"CUDA_VISIBLE_DEVICES={value!r}: {entry!r} repeats a device; the list ends there, as in CUDA")
            break
        visible.append(device)
    return visible, notes


def _lookup(devices: Sequence[CudaDevice], entry: str) -> CudaDevice | str:
    if not entry:
        return "empty entry"
    if re.fullmatch(r"\d+", entry):
        index = int(entry)
        for device in devices:
            if device.index == index:
                return device
        return f"no GPU {index} (nvidia-smi lists {len(devices)})"
    if entry.upper().startswith("MIG-"):
        return f"{entry!r} is a MIG instance, which has no Vulkan device"
    if entry.upper().startswith("GPU-"):
        prefix = normalize_uuid(entry)
        matches = [d for d in devices if d.uuid.startswith(prefix)]
        if len(matches) == 1:
            return matches[0]
        return f"{entry!r} matches {len(matches)} GPUs"
    return f"{entry!r} is neither an index nor a GPU- UUID"


def map_cuda_to_vulkan(cuda: Sequence[CudaDevice], vulkan: Sequence[VulkanDevice]) -> dict[int, int]:
    """``nvidia-smi`` index -> Vulkan device index, joined by UUID (devices without a match are absent)."""
    by_uuid = {normalize_uuid(d.uuid): d.index for d in vulkan if d.uuid}
    return {d.index: by_uuid[d.uuid] for d in cuda if d.uuid in by_uuid}


#: The value of ``CUDA_DEVICE_ORDER`` under which CUDA counts GPUs as ``nvidia-smi`` does (PCI bus order). CUDA's
#: default, ``FASTEST_FIRST``, puts the fastest first: the same order only when the GPUs are alike.
CUDA_BUS_ORDER = "PCI_BUS_ID"


def order_note(
    gpus: Sequence[int], cuda_visible: str | None, cuda: Sequence[CudaDevice], device_order: str | None
) -> str | None:
    """A note when ``gpus`` or the indices in ``CUDA_VISIBLE_DEVICES`` (taken in ``nvidia-smi`` order here) may
    name other GPUs for CUDA: the GPUs are not all of one model and ``CUDA_DEVICE_ORDER`` (``device_order``)
    is not :data:`CUDA_BUS_ORDER`. None when nothing depends on the order (identical GPUs, GPUs named by
    UUID, no spreading)."""
    names = list(dict.fromkeys(d.name for d in cuda))
    if len(names) < 2 or (device_order or "").strip() == CUDA_BUS_ORDER:
        return None
    indices = [e.strip() for e in (cuda_visible or "").split(",") if e.strip().isdigit()]
    if not indices and not (cuda_visible is None and gpus):
        return None
    setting = "is not set" if device_order is None else f"is {device_order!r}"
    return (
        f"the GPUs are not all alike ({', '.join(names)}) and CUDA_DEVICE_ORDER {setting}: CUDA then counts them "
        "fastest first, while gpus and the indices in CUDA_VISIBLE_DEVICES are taken in nvidia-smi (PCI bus) "
        f"order, so an index may name another GPU than in your CUDA code; set CUDA_DEVICE_ORDER={CUDA_BUS_ORDER} "
        "(for renderd and your CUDA code), or name the GPUs by UUID in CUDA_VISIBLE_DEVICES"
    )


@dataclass
class GpuPlan:
    """Where each slot renders: ``slots[i]`` is the device for instance ``i % len(slots)`` (empty: no
    spreading). ``reasons`` make the request unservable; ``notes`` only inform."""

    slots: list[int] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def plan_vulkan(
    gpus: Sequence[int],
    cuda_visible: str | None,
    cuda: Sequence[CudaDevice],
    vulkan: Sequence[VulkanDevice],
    *,
    device_order: str | None = None,
) -> GpuPlan:
    """Vulkan device indices for CloudRendering's ``-force-device-index``, one per slot.

    With ``nvidia-smi`` devices known, ``gpus`` index the CUDA-visible list (all visible devices when
    ``gpus`` is empty and ``CUDA_VISIBLE_DEVICES`` is set) and are mapped by UUID. Without them,
    ``gpus`` are Vulkan indices. ``device_order`` is ``CUDA_DEVICE_ORDER`` (see :func:`order_note`).
    """
    plan = GpuPlan()
    if not cuda:
        if cuda_visible is not None:
            plan.notes.append(
                "CUDA_VISIBLE_DEVICES is set but nvidia-smi lists no GPU, so it cannot be mapped; ignored"
            )
        gpu_devices = [d.name for d in vulkan if d.type != "CPU"]
        for g in gpus:
            if g >= len(vulkan):
                plan.reasons.append(
                    f"GPU {g} was asked for but Vulkan lists {len(vulkan)} device(s) (0..{len(vulkan) - 1}); "
                    "fix: use an index Vulkan lists (renderd doctor shows them)"
                )
            else:
                plan.slots.append(g)
                plan.labels.append(f"gpu {g} -> vulkan {g} ({vulkan[g].name})")
                if vulkan[g].type == "CPU" and gpu_devices:
                    plan.notes.append(
                        f"gpu {g} is Vulkan device {g}, {vulkan[g].name}, a CPU device, while Vulkan also lists "
                        f"{', '.join(gpu_devices)}: without nvidia-smi gpus are Vulkan device indices; use the "
                        "index of a GPU (renderd doctor lists them) unless rendering on the CPU is meant"
                    )
        return plan
    visible, plan.notes = apply_cuda_visible_devices(cuda, cuda_visible)
    if not gpus and cuda_visible is not None and not visible:
        # CUDA_VISIBLE_DEVICES="" or -1: the process is kept off the GPUs, so its players are too (left to
        # themselves they would take a GPU). A CPU Vulkan device (lavapipe) can still render.
        cpu = [d for d in vulkan if d.type == "CPU"]
        if cpu:
            plan.slots.append(cpu[0].index)
            plan.labels.append(f"no GPU -> vulkan {cpu[0].index} ({cpu[0].name}, CPU)")
            plan.notes.append(
                f"no GPU is visible under CUDA_VISIBLE_DEVICES={cuda_visible!r}, so players render on the CPU "
                f"Vulkan device {cpu[0].index} ({cpu[0].name}); unset it or list GPUs in it to render on a GPU"
            )
        else:
            plan.reasons.append(
                f"no GPU is visible under CUDA_VISIBLE_DEVICES={cuda_visible!r} and Vulkan has no CPU device to "
                "render on instead; fix: unset CUDA_VISIBLE_DEVICES or list the GPUs to render on in it (or "
                "install mesa-vulkan-drivers for CPU rendering)"
            )
        return plan
    wanted = list(gpus) if gpus else (list(range(len(visible))) if cuda_visible is not None else [])
    note = order_note(wanted, cuda_visible, cuda, device_order)
    if note is not None:
        plan.notes.append(note)
    mapping = map_cuda_to_vulkan(cuda, vulkan)
    for g in wanted:
        if g >= len(visible):
            shown = f" under CUDA_VISIBLE_DEVICES={cuda_visible!r}" if cuda_visible is not None else ""
            plan.reasons.append(
                f"GPU {g} was asked for but {len(visible)} GPU(s) are visible{shown}; "
                "fix: use an index below that, or widen CUDA_VISIBLE_DEVICES"
            )
            continue
        device = visible[g]
        index = mapping.get(device.index)
        if index is None:
            plan.reasons.append(
                f"GPU {g} (nvidia-smi {device.index}, {device.name}, GPU-{_dashed(device.uuid)}) has no Vulkan "
                "device with the same UUID; fix: install the NVIDIA Vulkan ICD (nvidia_icd.json, part of the "
                "driver; in containers set NVIDIA_DRIVER_CAPABILITIES to include graphics)"
            )
            continue
        plan.slots.append(index)
        plan.labels.append(f"gpu {g} -> nvidia-smi {device.index} ({device.name}) -> vulkan {index}")
    return plan


#: Variables the NVIDIA container runtime reads when a container starts: set for a player renderd starts, they
#: change nothing (its devices are the container's, chosen when renderd's container started).
CONTAINER_GPU_VARS = ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES")


def container_vars_note(overrides: Mapping[str, str] | None) -> str | None:
    """A note when the request's own ``env`` (``overrides``) sets a variable only the NVIDIA container
    runtime reads (:data:`CONTAINER_GPU_VARS`), else None."""
    named = [v for v in CONTAINER_GPU_VARS if overrides and v in overrides]
    if not named:
        return None
    return (
        f"{' and '.join(f'{v}={overrides[v]!r}' for v in named)} in env {'changes' if len(named) == 1 else 'change'} "
        "nothing for the players: the NVIDIA "
        "container runtime reads them only when a container starts, and renderd starts players as its own "
        "processes; choose their GPUs with gpus (or CUDA_VISIBLE_DEVICES), and set the container's GPUs when "
        "renderd's container is started (docker run --gpus ...)"
    )


def plan_screens(
    gpus: Sequence[int],
    cuda_visible: str | None,
    cuda: Sequence[CudaDevice],
    *,
    device_order: str | None = None,
) -> GpuPlan:
    """X screen numbers for Linux64, one per slot: screen ``k`` of a multi-screen display is taken to be
    driven by ``nvidia-smi`` GPU ``k`` (one screen per GPU, in bus order, as GPU X servers are usually
    configured). ``gpus`` index the CUDA-visible list when ``nvidia-smi`` is present; otherwise they are
    screen numbers. ``device_order`` is ``CUDA_DEVICE_ORDER`` (see :func:`order_note`)."""
    plan = GpuPlan()
    if not cuda:
        plan.slots = list(gpus)
        plan.labels = [f"gpu {g} -> screen {g}" for g in gpus]
        return plan
    visible, plan.notes = apply_cuda_visible_devices(cuda, cuda_visible)
    note = order_note(gpus, cuda_visible, cuda, device_order) if gpus else None
    if note is not None:
        plan.notes.append(note)
    for g in gpus:
        if g >= len(visible):
            plan.reasons.append(
                f"GPU {g} was asked for but {len(visible)} GPU(s) are visible; fix: use an index below that"
            )
            continue
        plan.slots.append(visible[g].index)
        plan.labels.append(f"gpu {g} -> nvidia-smi {visible[g].index} ({visible[g].name}) -> screen {visible[g].index}")
    return plan


# -- running the tools ------------------------------------------------------------------------------

_tool_cache: dict[tuple[object, ...], tuple[float, str | None, str | None]] = {}
#: Failures by the same key as :data:`_tool_cache`: ``(when, what went wrong, how many in a row)``.
_tool_failures: dict[tuple[object, ...], tuple[float, str, int]] = {}
_tool_lock = threading.Lock()
#: Counts :func:`clear_cache` calls: a run that began before one (a driver fixed, an X server started, then the daemon
#: reloaded) keeps neither its output nor its failure, which describe the drivers as they were before.
_tool_generation = 0


def _run_tool(argv: list[str], env: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(stdout, None) of a tool, or (None, what went wrong) when it fails or times out; (None, None) when it
    is not installed. An output is cached per command, PATH, every variable that changes what the Vulkan loader
    (and the NVIDIA tools) find, and the drivers on disk (:func:`vulkan.driver_fingerprint`: a driver installed
    since is seen at once), for :data:`GPU_TOOL_CACHE_SECONDS`. A failure or a timeout is cached by the same key,
    briefly: the first is not (a tool slow once, a driver initialising, is asked again at the next check), a second
    in a row is reused for :data:`GPU_TOOL_FAILURE_CACHE_SECONDS` (a tool that hangs until its deadline stalls one
    check per that many seconds, not every check; a driver fixed since is seen that long after at most).
    :func:`clear_cache` (a reload of the daemon) forgets both, and a run under way as it is called keeps neither."""
    binary = shutil.which(argv[0], path=env.get("PATH"))
    if binary is None:
        return None, None
    key = (
        " ".join(argv), binary, env.get("PATH", ""), env.get("CUDA_VISIBLE_DEVICES"), loader_env_key(env),
        driver_fingerprint(env),
    )
    with _tool_lock:
        now = time.monotonic()
        generation = _tool_generation
        cached = _tool_cache.get(key)
        if cached is not None and now - cached[0] < GPU_TOOL_CACHE_SECONDS:
            return cached[1], cached[2]
        failed = _tool_failures.get(key)
        if failed is not None and failed[2] >= 2 and now - failed[0] < GPU_TOOL_FAILURE_CACHE_SECONDS:
            return None, failed[1]
    output: str | None = None
    problem: str | None = None
    try:
        returncode, stdout, stderr = _run_bounded([binary, *argv[1:]], env)
    except subprocess.TimeoutExpired:
        log.warning("%s did not answer within %g s", argv[0], GPU_TOOL_TIMEOUT)
        problem = f"it did not answer within {GPU_TOOL_TIMEOUT:g} s"
    except OSError as exc:
        log.warning("cannot run %s: %s", argv[0], exc)
        problem = f"it cannot be run ({exc})"
    else:
        if returncode == 0:
            output = stdout.decode("utf-8", "replace")
        else:
            # nvidia-smi says what is wrong on stdout ("Failed to initialize NVML: ..."), others on stderr
            said = (stderr or stdout).decode("utf-8", "replace").strip()[-300:]
            log.warning("%s failed (%s): %s", argv[0], describe_exit(returncode), said)
            problem = f"it failed ({describe_exit(returncode)}" + (f": {said.splitlines()[-1]})" if said else ")")
    with _tool_lock:
        now = time.monotonic()
        if generation != _tool_generation:  # (cleared while it ran: answered, not kept)
            return output, problem
        if problem is not None:
            before = _tool_failures.get(key)
            in_a_row = before[2] + 1 if before is not None and now - before[0] < GPU_TOOL_FAILURE_MEMORY_SECONDS else 1
            if in_a_row >= 2:
                problem += (
                    f", {in_a_row} times in a row (it is not run again for {GPU_TOOL_FAILURE_CACHE_SECONDS:g} s, "
                    "or until the daemon is reloaded)"
                )
            _remember(_tool_failures, key, now, GPU_TOOL_FAILURE_MEMORY_SECONDS)
            _tool_failures[key] = (now, problem, in_a_row)
            return output, problem
        _tool_failures.pop(key, None)
        _remember(_tool_cache, key, now, GPU_TOOL_CACHE_SECONDS)
        _tool_cache[key] = (now, output, problem)
    return output, problem


def _remember(cache: dict[tuple[object, ...], tuple[float, Any, Any]], key: tuple[object, ...], now: float,
              lifetime: float) -> None:
    """Make room in ``cache`` (whose values start with the time they were stored) for ``key``: drop the entries
    older than ``lifetime``, then the oldest beyond :data:`GPU_TOOL_CACHE_ENTRIES` - 1 (``key`` included, to be
    (re)inserted last by the caller: the dict's order is the entries' age)."""
    cache.pop(key, None)
    for old in [k for k, value in cache.items() if now - value[0] >= lifetime]:
        del cache[old]
    while len(cache) >= GPU_TOOL_CACHE_ENTRIES:
        del cache[next(iter(cache))]


def _run_bounded(argv: list[str], env: Mapping[str, str]) -> tuple[int, bytes, bytes]:
    """(exit status, stdout, stderr) of a tool run in a process group of its own. Raises
    ``subprocess.TimeoutExpired`` after :data:`GPU_TOOL_TIMEOUT`, once the whole group is killed (a wrapper's
    or driver's helper included) and the pipes are closed: a helper out of the group that holds them is not
    waited for longer than :data:`GPU_TOOL_DRAIN_TIMEOUT`."""
    reap_left_behind()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env),
        process_group=0,
        # A tool stuck in a wedged driver must not outlive the daemon that ran it.
        preexec_fn=die_with_parent(os.getpid()),  # noqa: PLW1509 (only prctl, signal and getppid run in the child)
    )
    try:
        stdout, stderr = proc.communicate(timeout=GPU_TOOL_TIMEOUT)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        try:
            proc.communicate(timeout=GPU_TOOL_DRAIN_TIMEOUT)
        except subprocess.TimeoutExpired:
            pass
        raise
    finally:
        if proc.poll() is None:
            _kill_group(proc)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        try:
            proc.wait(timeout=GPU_TOOL_REAP_TIMEOUT)
        except subprocess.TimeoutExpired:
            log.error(
                "%s (pid %d) survived SIGKILL for %g s (stuck in the kernel: a wedged driver?); left behind",
                argv[0], proc.pid, GPU_TOOL_REAP_TIMEOUT,
            )
            leave_behind(proc)
    return proc.returncode, stdout, stderr


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def nvidia_devices(env: Mapping[str, str]) -> list[CudaDevice]:
    """The GPUs ``nvidia-smi -L`` lists (empty when it is missing or fails)."""
    return nvidia_survey(env)[0]


def nvidia_survey(env: Mapping[str, str]) -> tuple[list[CudaDevice], str | None]:
    """The GPUs ``nvidia-smi -L`` lists, and a note when it is installed but did not list them (it failed or
    timed out: GPU indices cannot be mapped through it), else None."""
    text, problem = _run_tool(["nvidia-smi", "-L"], env)
    if problem is not None:
        return [], f"nvidia-smi is installed but {problem}"
    return (parse_nvidia_smi(text) if text else []), None


def vulkaninfo_devices(env: Mapping[str, str]) -> list[VulkanDevice]:
    """The devices ``vulkaninfo --summary`` lists (empty when it is missing or fails)."""
    text, _ = _run_tool(["vulkaninfo", "--summary"], env)
    return parse_vulkaninfo(text) if text else []


def clear_cache() -> None:
    """Forget cached tool outputs and failures (the next check runs the tools again); a run under way meanwhile
    answers its caller but keeps nothing."""
    global _tool_generation
    with _tool_lock:
        _tool_generation += 1
        _tool_cache.clear()
        _tool_failures.clear()
