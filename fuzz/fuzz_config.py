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
_DIR = tempfile.mkdtemp(prefix="renderd-fuzz-config-")
_FILE = os.path.join(_DIR, "renderd.toml")


def one_input(data: bytes) -> None:
    text = data.decode("utf-8", "replace")
    try:
        loads(text, path=PATH, resolve=False)
    except ConfigError as exc:
        if exc.path != PATH:
            raise AssertionError(f"ConfigError without the file's name: {exc}") from exc
    with open(_FILE, "wb") as f:
        f.write(data)
    try:
        load(_FILE, resolve=False)
    except ConfigError as exc:
        if exc.path != _FILE:
            raise AssertionError(f"ConfigError without the file's name: {exc}") from exc


if __name__ == "__main__":
    try:
        atheris.Setup(sys.argv, one_input)
        atheris.Fuzz()
    finally:
        try:
            os.unlink(_FILE)
        except FileNotFoundError:
            pass
        os.rmdir(_DIR)
