"""Run in a child process by test_platform_gl.py: render poses with the numpy and the gl renderer under
``RENDERD_PLATFORM`` (GLX on $DISPLAY for Linux64, EGL otherwise) and print how much they agree as JSON.

A child keeps the GL context and its X connection out of the test process: stopping the test's Xvfb
can then never take pytest down with an X I/O error.
"""

from __future__ import annotations

import json
import sys

import numpy as np

from renderd.player.gl import GLRenderer
from renderd.player.renderer import NumpyRenderer, RenderState
from renderd.player.scene import AGENT_Y, CAMERA_HEIGHT, SCENES

#: Poses (yaw, pitch, dx, dz) per scene: straight ahead, turned and tilted both ways, moved.
POSES = [(0, 0, 0.0, 0.0), (90, 30, 0.0, 0.0), (200, -20, 0.3, 0.5), (45, 10, -0.4, 0.25)]
RGB_TOLERANCE = 2
DEPTH_RELATIVE_TOLERANCE = 1e-3


def main() -> int:
    width, height = int(sys.argv[1]), int(sys.argv[2])
    gl = GLRenderer()
    numpy_renderer = NumpyRenderer()
    worst = {"rgb": 1.0, "ids": 1.0, "depth": 1.0}
    for scene in SCENES.values():
        start = scene.start
        for yaw, pitch, dx, dz in POSES:
            position = (start.x + dx, AGENT_Y + CAMERA_HEIGHT, start.z + dz)
            state = RenderState(scene, width, height, position, yaw, pitch, 90.0)
            a = gl.render(state)
            b = numpy_renderer.render(state)
            assert a[0].shape == b[0].shape and a[0].dtype == np.uint8
            assert a[1].shape == b[1].shape and a[1].dtype == np.float32
            assert a[2].shape == b[2].shape and a[2].dtype == np.uint8
            rgb = (np.abs(a[0].astype(np.int16) - b[0].astype(np.int16)).max(axis=2) <= RGB_TOLERANCE).mean()
            ids = (a[2] == b[2]).all(axis=2).mean()
            depth = (np.abs(a[1] - b[1]) <= DEPTH_RELATIVE_TOLERANCE * b[1]).mean()
            worst = {k: min(worst[k], float(v)) for k, v in (("rgb", rgb), ("ids", ids), ("depth", depth))}
    result = {"where": gl.where, "renderer": gl.gl_renderer, "vendor": str(gl.ctx.info.get("GL_VENDOR")), **worst}
    gl.close()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
