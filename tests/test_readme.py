"""The README's test command is what CI runs."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from tests.daemon.conftest import daemon  # noqa: F401 - a fixture
from tests.helpers.leaks import wait_for

ROOT = Path(__file__).resolve().parent.parent


def _test_command() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("Run the tests", 1)[1]
    return re.search(r"```sh\n(.+?)\n```", section, re.S).group(1).strip()


def test_ci_runs_exactly_the_readme_test_command():
    command = _test_command()
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert command in ci_lines


def test_readme_names_the_main_job():
    readme = (ROOT / "README.md").read_text()
    assert "pip install . && renderd start" in readme


def _python_example() -> str:
    readme = (ROOT / "README.md").read_text()
    return re.search(r"```python\n(.+?)\n```", readme, re.S).group(1)


def test_readme_example_runs_as_written_against_the_built_in_daemon(daemon, monkeypatch):
    # The example's comments say what its events hold: a (300, 300, 3) uint8 frame and float32 depth in
    # metres. Run unchanged, it printed None for depth_frame: the reference player (and a Unity build)
    # sends depth only when asked for it, and the example did not ask.
    d = daemon()  # `renderd start` on its built-in default: environment demo on renderd-player
    monkeypatch.setenv("RENDERD_SOCKET", d.socket)
    namespace: dict = {}
    exec(compile(_python_example(), "README.md", "exec"), namespace)
    event = namespace["event"]
    assert event.frame.shape == (300, 300, 3) and event.frame.dtype == np.uint8
    assert event.depth_frame is not None, "the example's depth_frame is None"
    assert event.depth_frame.shape == (300, 300) and event.depth_frame.dtype == np.float32
    assert event.metadata["lastActionSuccess"] is True
    # The leased player went back to the daemon, ready for the next client.
    wait_for(lambda: d.client.health()["environments"]["demo"] == {"wanted": 1, "ready": 1, "leased": 0,
                                                                   "failed": 0} or None,
             10, "the leased player to be ready again")
    assert "lease of demo[0]" in d.output()


def test_readme_installs_extras_from_the_checkout():
    # renderd is installed from its checkout (`pip install .`): a line naming the package alone
    # (`pip install 'renderd[gym]'`) asks a registry for a project that is not there. The Gymnasium layer
    # (docs/vector.md, examples/) needs the gym extra, and the README said nowhere how to get it.
    readme = (ROOT / "README.md").read_text()
    installs = re.findall(r"pip install ([^&`\n]+)", readme)
    assert installs and all(arg.split()[-1].strip("'\"").startswith(".") for arg in installs), installs
    assert "pip install '.[gym]'" in readme
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r"^gym = \[", pyproject, re.M)


def test_readme_says_how_the_foreground_daemon_is_used_and_stopped():
    # `renderd start` does not return: the README must say so, and how to stop it (Ctrl-C, checked by
    # tests/test_journey_review10.py) and see it (renderd status).
    section = (ROOT / "README.md").read_text().split("## On a fresh machine", 1)[1].split("Run the tests", 1)[0]
    assert "foreground" in section and "Ctrl-C" in section and "renderd status" in section


def test_readme_says_which_builds_run_as_they_are():
    # The opening listed "AI2-THOR builds, ML-Agents builds, custom games" as what renderd runs, but renderd
    # speaks only AI2-THOR's framing (pipes, or HTTP): an ML-Agents build talks gRPC to mlagents-envs and does
    # not run under renderd unless its player speaks that protocol.
    intro = (ROOT / "README.md").read_text().split("```python", 1)[0]
    assert "ML-Agents builds," not in intro
    assert "speaks AI2-THOR's protocol" in intro and "docs/protocol.md" in intro
