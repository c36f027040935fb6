"""How long the reference player takes to produce a frame, in-process (no pipes).

    python benchmarks/player_render.py [--frames N] [--sizes 300x300,1024x1024]

Rows: the renderer alone (RGB + depth + ids, a new pose every frame so no cache helps), and a whole
``Player.handle`` step (render, wire layout, metadata; depth and instance segmentation on), for 3-byte
RGB and CloudRendering's RGBA, plus the static-frame mode. Prints milliseconds per frame (median and
90th percentile).
"""

from __future__ import annotations

import argparse
import statistics
import time

from renderd.player.core import Player
from renderd.player.renderer import NumpyRenderer, RenderState
from renderd.player.scene import AGENT_Y, CAMERA_HEIGHT, SCENES
from renderd.protocol import encode_metadata


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_renderer(width: int, height: int, frames: int) -> list[float]:
    renderer = NumpyRenderer(cache_size=0)
    scene = SCENES["FloorPlan1"]
    times = []
    for i in range(frames + 2):
        state = RenderState(scene, width, height, (0.0, AGENT_Y + CAMERA_HEIGHT, -2.0), (i * 7.0) % 360, 10.0)
        t = time.perf_counter()
        renderer.render(state)
        if i >= 2:  # the first frames build the ray tables
            times.append((time.perf_counter() - t) * 1000)
    return times


def bench_player(width: int, height: int, frames: int, **kwargs) -> list[float]:
    player = Player(width=width, height=height, **kwargs)
    player.handle({"action": "Initialize", "renderDepthImage": True, "renderInstanceSegmentation": True})
    times = []
    for i in range(frames + 2):
        t = time.perf_counter()
        metadata, _ = player.handle({"action": "RotateRight", "degrees": 7})
        encode_metadata(metadata)
        if i >= 2:
            times.append((time.perf_counter() - t) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=30, help="frames timed per row (default 30)")
    parser.add_argument("--sizes", default="300x300,1024x1024",
                        help="comma-separated WIDTHxHEIGHT (default 300x300,1024x1024)")
    args = parser.parse_args()
    if args.frames < 1:
        parser.error(f"--frames must be at least 1, not {args.frames}")
    sizes = []
    for size in (s.strip() for s in args.sizes.split(",")):
        w, _, h = size.partition("x")
        if not (w.isdigit() and h.isdigit() and int(w) > 0 and int(h) > 0):
            parser.error(f"--sizes: {size!r} is not WIDTHxHEIGHT (e.g. 300x300)")
        sizes.append((int(w), int(h)))
    rows = []
    for w, h in sizes:
        rows.append((f"{w}x{h}", "renderer (rgb+depth+ids)", bench_renderer(w, h, args.frames)))
        rows.append((f"{w}x{h}", "Player.handle, RGB", bench_player(w, h, args.frames)))
        rows.append((f"{w}x{h}", "Player.handle, RGBA", bench_player(w, h, args.frames, platform="CloudRendering")))
        rows.append((f"{w}x{h}", "Player.handle, static frame", bench_player(w, h, args.frames, static_frame=True)))
    print(f"{'size':>10}  {'what':<30} {'median ms':>10} {'p90 ms':>8}")
    for size, what, times in rows:
        print(f"{size:>10}  {what:<30} {statistics.median(times):>10.2f} {_percentile(times, 0.9):>8.2f}")


if __name__ == "__main__":
    main()
