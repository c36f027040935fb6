"""CloudRendering's report (what renderd doctor prints) carries the Vulkan probe's notes: a driver that crashed in its
teardown after listing its devices is used, and the report says so. Real loader, a stand-in driver built here."""

from __future__ import annotations

from renderd.platforms import vulkan
from renderd.platforms.cloudrendering import CloudRendering
from renderd.platforms.request import PlatformRequest
from tests.platforms.test_vulkan_teardown_review16v import standin_icd  # noqa: F401  (fixture)


def test_the_report_lists_a_teardown_crash_note(standin_icd, monkeypatch):  # noqa: F811
    for name, value in standin_icd.items():
        if name.startswith("VK_"):
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("STANDIN_VK_MODE", "destroy:crash")
    vulkan.clear_cache()
    try:
        report = CloudRendering().check(PlatformRequest(platform="CloudRendering", system="Linux", width=32, height=32))
    finally:
        vulkan.clear_cache()
    assert report.valid, report.reasons
    notes = report.details.get("notes", [])
    assert any("crashed in vkDestroyInstance" in note for note in notes), report.details
