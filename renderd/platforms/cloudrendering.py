"""``CloudRendering``: Unity's offscreen Vulkan player. Needs a Vulkan loader and at least one
physical device (none when headless: ``-nographics`` opens no graphics device); no X display. Spreads
instances over GPUs with ``-force-device-index``."""

from __future__ import annotations

import logging

from renderd.platforms import gpus as gpu_mod
from renderd.platforms import vulkan
from renderd.platforms.base import HEADLESS_ARGS, Platform, Selection
from renderd.platforms.request import PlatformReport, PlatformRequest

log = logging.getLogger(__name__)


class CloudRendering(Platform):
    name = "CloudRendering"
    instructions = vulkan.INSTALL_HINT

    def check(self, request: PlatformRequest) -> PlatformReport:
        if request.system != "Linux":
            return self.report(request, [f"CloudRendering players run on Linux only (this system is {request.system})"])
        if request.headless:  # -batchmode -nographics: Unity opens no graphics device, Vulkan is not touched
            return self.report(request, [], note="headless: no Vulkan needed")
        env = request.environ()
        probe = vulkan.probe_vulkan(env)
        if not probe.ok:
            # Installing is the fix only when the loader or a driver is missing or broken; not when a variable
            # hides the installed drivers, or this process is short of descriptors.
            install = probe.fix in (
                vulkan.LOADER_FIX, vulkan.DRIVER_FIX, vulkan.DRIVER_BROKEN_FIX, vulkan.BROKEN_MANIFEST_FIX
            )
            return self.report(
                request, [f"Vulkan is not usable: {probe.error}; fix: {probe.fix}"], instructions=None if install else ""
            )
        if not probe.devices:
            return self.report(
                request,
                [f"the Vulkan loader works but lists no physical device; fix: {vulkan.DRIVER_FIX}"],
                vulkan_api=probe.api_version,
            )
        devices = list(probe.devices)
        cuda_visible = env.get("CUDA_VISIBLE_DEVICES")
        cuda, nvidia_problem = (
            gpu_mod.nvidia_survey(env) if (request.gpus or cuda_visible is not None) else ([], None)
        )
        if cuda and any(d.uuid is None for d in devices):
            # A Vulkan 1.0 driver gives no UUIDs to the probe; vulkaninfo may still know them.
            listed = gpu_mod.vulkaninfo_devices(env)
            if len(listed) == len(devices):
                devices = [d if d.uuid else listed[d.index] for d in devices]
        plan = gpu_mod.plan_vulkan(
            request.gpus, cuda_visible, cuda, devices, device_order=env.get("CUDA_DEVICE_ORDER")
        )
        if nvidia_problem is not None:
            plan.notes.insert(0, f"{nvidia_problem}; gpus are taken as Vulkan device indices, which need not be CUDA's")
        container_note = gpu_mod.container_vars_note(request.env)
        if container_note is not None:
            plan.notes.append(container_note)
        plan.notes.extend(probe.notes)  # (a driver that hung or crashed after the probe had its answer)
        details = {
            "devices": [d.describe() for d in devices],
            "vulkan_devices": [
                {"index": d.index, "name": d.name, "type": d.type, "uuid": d.uuid} for d in devices
            ],
            "vulkan_api": probe.api_version,
            "device_indices": plan.slots,
            "gpu_slots": plan.labels,
        }
        if plan.notes:
            details["notes"] = plan.notes
        if all(d.type == "CPU" for d in devices):
            details["note"] = "only a CPU Vulkan device (software rendering: it works, slowly)"
            if probe.broken_drivers:
                # A GPU server whose GPU driver does not load renders on lavapipe: valid, but surely not meant.
                details.setdefault("notes", []).append(
                    "a Vulkan driver is installed but cannot be loaded, so players render on the CPU: "
                    f"{'; '.join(probe.broken_drivers)}; fix: {vulkan.BROKEN_MANIFEST_FIX}"
                )
        # Vulkan works here: what is wrong is the GPUs asked for (each reason says what to do), not an install.
        return self.report(request, plan.reasons, instructions="" if plan.reasons else None, **details)

    def prepare(self, request: PlatformRequest, report: PlatformReport) -> Selection:
        args = list(HEADLESS_ARGS) if request.headless else []
        indices = report.details.get("device_indices") or []
        slots = [({}, ["-force-device-index", str(i)]) for i in indices]
        return Selection(
            self.name,
            env=self.base_env(),
            args=args,
            report=report,
            request=request,
            slots=slots,
            slot_labels=report.details.get("gpu_slots", []),
        )
