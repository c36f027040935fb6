"""Coverage-guided fuzzing of configuration files with atheris (run on demand, not in the test suite).

    pip install atheris
    python fuzz/fuzz_config.py -atheris_runs=200000               # or -max_total_time=300
    python fuzz/fuzz_config.py -dict=fuzz/config.dict ...         # optional: TOML and key-name tokens

Each input is parsed as a TOML configuration (``renderd.config.loads``, executables not resolved, and
``load`` of the raw bytes from a file); anything but a ConfigError that names the file is a finding.
"""

from __future__ import annotations

import os
import sys
import tempfile

import atheris

with atheris.instrument_imports():
    from renderd.config import ConfigError, load, loads

PATH = "fuzz.toml"


def one_input(data: bytes) -> None:
    text = data.decode("utf-8", "replace")
    try:
        loads(text, path=PATH, resolve=False)
    except ConfigError as exc:
        if exc.path != PATH:
            raise AssertionError(f"ConfigError without the file's name: {exc}") from exc
    # A file of its own per input, removed at once: libFuzzer ends the process with exit(), so no
    # Python cleanup would run at the end of a session.
    fd, path = tempfile.mkstemp(prefix="renderd-fuzz-", suffix=".toml")
    try:
        os.write(fd, data)
        os.close(fd)
        fd = -1
        try:
            load(path, resolve=False)
        except ConfigError as exc:
            if exc.path != path:
                raise AssertionError(f"ConfigError without the file's name: {exc}") from exc
    finally:
        if fd >= 0:
            os.close(fd)
        os.unlink(path)


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
