"""Configuration: an executable the kernel cannot start is refused when the file is loaded."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from renderd.config import resolve_executable


def _binfmt_handlers() -> bool:
    try:
        return bool(set(os.listdir("/proc/sys/fs/binfmt_misc")) - {"register", "status"})
    except OSError:
        return False


@pytest.mark.skipif(_binfmt_handlers(), reason="binfmt_misc handlers may run files of other formats here")
@pytest.mark.parametrize("content", [b"echo hello\n", b""], ids=["script without #!", "empty file"])
def test_an_executable_that_is_neither_a_program_nor_a_script_is_refused(tmp_path, content):
    # The kernel refuses to start it (ENOEXEC, exec format error); a shell would run it as a script, so it
    # "works" when tried by hand, and a daemon configured with it failed every start.
    path = tmp_path / "player"
    path.write_bytes(content)
    path.chmod(0o755)
    with pytest.raises(ValueError, match="#!"):
        resolve_executable(str(path))
    config = tmp_path / "renderd.toml"
    config.write_text(f'[environments.demo]\nexecutable = "{path}"\nplatform = "headless"\n')
    result = subprocess.run([sys.executable, "-m", "renderd", "validate", str(config)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "#!" in result.stderr + result.stdout, result


def test_programs_and_scripts_are_still_accepted(tmp_path):
    script = tmp_path / "player.sh"
    script.write_text("#!/bin/sh\nexec true\n")
    script.chmod(0o755)
    assert resolve_executable(str(script)) == str(script)
    assert resolve_executable(sys.executable) == os.path.abspath(sys.executable) or resolve_executable(sys.executable)
