"""CloudRendering, ninth review: a Vulkan driver put in place after a failed check is seen by the next check."""

from __future__ import annotations

import glob
import json
import os

import pytest

from renderd.platforms import vulkan
from renderd.platforms.cloudrendering import CloudRendering
from renderd.platforms.request import PlatformRequest


def _working_manifest() -> dict:
    """An installed ICD manifest whose driver enumerates a device here (lavapipe), or skip."""
    probe = vulkan.probe_vulkan(dict(os.environ))
    if not probe.ok or not probe.devices:
        pytest.skip("no Vulkan device here (apt-get install libvulkan1 mesa-vulkan-drivers)")
    for path in sorted(glob.glob("/usr/share/vulkan/icd.d/lvp_icd*.json")):
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    pytest.skip("lavapipe's ICD manifest is not installed (apt-get install mesa-vulkan-drivers)")


def test_a_driver_installed_after_a_failed_check_is_seen_by_the_next_one(tmp_path):
    # The probe's answer was cached for five minutes per environment, whatever the answer: a manifest put at
    # the path VK_ICD_FILENAMES names after a check said it does not exist (or a driver installed after "no
    # Vulkan driver was found") kept that reason, now false, for every check of the next five minutes, and
    # auto chose another platform meanwhile.
    manifest = _working_manifest()
    path = tmp_path / "icd.json"
    request = PlatformRequest(platform="CloudRendering", env={"VK_ICD_FILENAMES": str(path)})
    vulkan.clear_cache()
    try:
        before = CloudRendering().check(request)
        assert not before.valid and f"names {path}, which does not exist" in before.reasons[0], before.reasons
        path.write_text(json.dumps(manifest), encoding="utf-8")
        after = CloudRendering().check(request)
        assert after.valid, after.reasons
        assert after.details["devices"], after.details
        # the answer for an unchanged driver set is still reused
        assert vulkan.probe_vulkan(request.environ()) is vulkan.probe_vulkan(request.environ())
        path.unlink()
        gone = CloudRendering().check(request)
        assert not gone.valid and "does not exist" in gone.reasons[0], gone.reasons
    finally:
        vulkan.clear_cache()
