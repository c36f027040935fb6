"""renderd.gym without gymnasium says what to install."""

from __future__ import annotations

import subprocess
import sys

BLOCK_GYMNASIUM = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "gymnasium" or name.startswith("gymnasium."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Block())
try:
    import renderd.gym
except ImportError as exc:
    print(exc)
    sys.exit(3)
"""


def test_importing_the_gym_layer_without_gymnasium_names_the_extra():
    result = subprocess.run([sys.executable, "-c", BLOCK_GYMNASIUM], capture_output=True, text=True, timeout=60)
    assert result.returncode == 3, result
    assert "gym extra" in result.stdout and "gymnasium>=1.1" in result.stdout, result.stdout
