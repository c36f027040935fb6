"""The runnable parts of README.md, docs/protocol.md, docs/platforms.md and docs/vector.md, run as written."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _python_block_after(text: str, heading: str) -> str:
    section = text.split(heading + "\n", 1)[1]
    return re.search(r"```python\n(.+?)\n```", section, re.S).group(1)


def test_protocol_md_decoder_api_snippet_runs_as_written():
    # The snippet used names it never defined (`fd`, `md`, `rgb`, no imports), and handed encode_message the
    # metadata as it would be read: encode_message takes msgpack bytes (encode_metadata), and a dict is a
    # TypeError from memoryview. Run as written, it writes one message into a real pipe and reads it back.
    code = _python_block_after((DOCS / "protocol.md").read_text(), "## Decoder API (for transports)")
    namespace: dict = {}
    exec(compile(code, "docs/protocol.md", "exec"), namespace)
    assert namespace["rest"] == []
    assert bytes(namespace["image"]) == bytes(24)
    assert namespace["msg"].first(namespace["FieldType"].METADATA) is not None


def test_platforms_md_select_snippet_runs_as_written():
    code = _python_block_after((DOCS / "platforms.md").read_text(), "missing and how to fix it.")
    namespace: dict = {}
    exec(compile(code, "docs/platforms.md", "exec"), namespace)
    env, args = namespace["env"], namespace["args"]
    assert env["RENDERD_PLATFORM"] == namespace["selection"].name
    assert isinstance(args, list)


def _ci_packages() -> set[str]:
    line = next(line for line in (ROOT / ".ci" / "run").read_text().splitlines() if "apt-get install" in line)
    return set(line.split("apt-get install", 1)[1].split(">", 1)[0].split()) - {"-y", "-qq"}


def test_readme_says_what_a_fresh_machine_needs_for_a_unity_build():
    # The README said how to install renderd and run its demo, but not that the demo needs no system
    # package while a Unity build needs a platform, nor what to install for one on a machine with no GPU.
    readme = (ROOT / "README.md").read_text()
    fresh = readme.split("## On a fresh machine", 1)[1].split("Run the tests", 1)[0]
    assert "needs no display, GPU or system package" in fresh and "renderd doctor" in fresh
    installs = [line for line in fresh.splitlines() if "apt-get install" in line]
    assert len(installs) == 1 and installs[0].startswith("apt-get update && "), installs
    packages = set(installs[0].split("apt-get install", 1)[1].split()) - {"-y"}
    # the packages CI installs for the same platforms (Xvfb with GLX, EGL, Vulkan lavapipe)
    assert packages and packages <= _ci_packages(), packages - _ci_packages()
    assert "log_dir" in fresh, "the README does not say that the players' logs go when the daemon stops"


def test_docs_name_the_gym_extra_as_it_is_installed():
    # renderd is installed from its checkout: `renderd[gym]` names a package a registry does not have.
    for path in (ROOT / "README.md", DOCS / "vector.md", DOCS / "platforms.md", ROOT / "examples" / "README.md"):
        text = path.read_text()
        assert "renderd[gym]" not in text, f"{path.relative_to(ROOT)} names the extra as renderd[gym]"
    assert "pip install '.[gym]'" in (DOCS / "vector.md").read_text()
