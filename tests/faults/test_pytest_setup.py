"""The test suite's own settings. With ``filterwarnings = error``, a deprecation warning raised inside
a plugin's hook turns a test failure into an INTERNALERROR that hides the report: the hypothesis plugin,
reporting a failure, writes a patch with libcst, whose import of typing_inspect creates a
``mypy_extensions.TypedDict`` (deprecated). pyproject.toml ignores exactly that warning."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("hypothesis")

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"

CHILD_TESTS = """
import warnings

from hypothesis import given, settings, strategies as st


def test_the_warning_libcst_raises_on_import_is_not_an_error():
    # What importing libcst does (the hypothesis plugin imports it to write a patch for a failure).
    warnings.warn("mypy_extensions.TypedDict is deprecated, and will be removed in a future version. "
                  "Use typing.TypedDict or typing_extensions.TypedDict instead.", DeprecationWarning)


@settings(database=None, derandomize=True)
@given(st.integers())
def test_fails(x):
    assert x < 5
"""


def test_a_failing_hypothesis_test_is_reported_not_an_internal_error(tmp_path: Path) -> None:
    (tmp_path / "test_child.py").write_text(CHILD_TESTS)
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(PYPROJECT), "--rootdir", str(tmp_path), "-p", "no:cacheprovider",
         "-q", "test_child.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )
    text = out.stdout + out.stderr
    assert "INTERNALERROR" not in text, text[-3000:]
    assert "1 failed, 1 passed" in text, text[-3000:]  # only the hypothesis test fails
    # hypothesis names the failing input ("Falsifying example" before 6.1xx, "Failing test case" since)
    assert ("Falsifying example" in text or "Failing test case" in text) and "x=5" in text, text[-3000:]
