"""``headless``: no rendering at all (Unity's ``-batchmode -nographics``). Always available; the
player produces metadata but no images, so ``auto`` picks it only when the request says ``headless``."""

from __future__ import annotations

from renderd.platforms.base import HEADLESS_ARGS, Platform, Selection
from renderd.platforms.request import PlatformReport, PlatformRequest


class Headless(Platform):
    name = "headless"
    instructions = "nothing to install; note that a headless player renders no images"

    def check(self, request: PlatformRequest) -> PlatformReport:
        return self.report(request, [], note="no images: the player runs with -batchmode -nographics")

    def prepare(self, request: PlatformRequest, report: PlatformReport) -> Selection:
        return Selection(self.name, env=self.base_env(), args=HEADLESS_ARGS, report=report, request=request)
