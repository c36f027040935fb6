"""A reload of the daemon (SIGHUP) forgets the platform probe results it cached: an operator who fixes a GPU driver
and reloads gets the new verdict for the players the reload retries, not the one cached before the fix. A real
``renderd start`` with real players; nvidia-smi is a stand-in executable on the daemon's PATH (no NVIDIA GPU can
exist here), whose output a file sets, as a driver's state would."""

from __future__ import annotations

import os
import signal
import stat

import pytest

from renderd.platforms import vulkan
from tests.daemon.conftest import daemon, fast_config, wait_for  # noqa: F401 (daemon: the fixture)

DEADLINE = 60.0


def _lavapipe_uuid() -> str:
    probe = vulkan.probe_vulkan(dict(os.environ))
    uuids = [d.uuid for d in probe.devices if d.uuid]
    if not probe.ok or not uuids:
        pytest.skip(f"no Vulkan device with a UUID here: {probe.error}")
    return uuids[0]


def test_a_reload_reprobes_the_gpus_so_a_fixed_driver_is_seen(daemon, tmp_path):
    uuid = _lavapipe_uuid()
    tools = tmp_path / "bin"
    tools.mkdir()
    state = tmp_path / "driver-state"
    runs = tmp_path / "runs"
    fake = tools / "nvidia-smi"
    # Before the fix the GPU's Vulkan driver is missing: nvidia-smi lists a GPU Vulkan does not; after it, the
    # GPU's UUID is the one of the (only) Vulkan device.
    state.write_text("GPU 0: NVIDIA A100 (UUID: GPU-00000000-1111-2222-3333-444455556666)\n")
    fake.write_text(f"#!/bin/sh\necho run >> '{runs}'\ncat '{state}'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    text = fast_config().replace('platform = "headless"', 'platform = "CloudRendering"\n    gpus = [0]')
    d = daemon(text, env={"PATH": f"{tools}{os.pathsep}{os.environ.get('PATH', '')}"})
    try:
        players = d.wait_players(lambda ps: ps[0]["state"] == "FAILED", timeout=DEADLINE, what="the player FAILED")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; players: {d.players()}; daemon log:\n{d.output()[-3000:]}") from None
    assert "has no Vulkan device with the same UUID" in players[0]["reason"], players
    before = len(runs.read_text().splitlines())
    assert before >= 1

    state.write_text(f"GPU 0: NVIDIA A100 (UUID: GPU-{uuid})\n")  # the driver is fixed
    d.signal(signal.SIGHUP)
    try:
        players = d.wait_players(
            lambda ps: ps[0]["state"] in ("READY", "LEASED"), timeout=DEADLINE,
            what="the retried player READY with the fixed driver (not the verdict cached before the reload)",
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}; players: {d.players()}; daemon log:\n{d.output()[-3000:]}") from None
    assert players[0]["platform"] == "CloudRendering"
    assert len(runs.read_text().splitlines()) > before
    wait_for(lambda: "platform probe results forgotten" in d.output(), DEADLINE, "the reload's log line")
