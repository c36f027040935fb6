"""The vector session changes its slots' sessions through Session's own methods (holder, a slot's player stopped
while a call runs), never by writing their private attributes."""

from __future__ import annotations

import ast
from pathlib import Path

import renderd.vector

def test_the_vector_session_writes_no_attribute_of_the_sessions_it_holds():
    tree = ast.parse(Path(renderd.vector.__file__).read_text())
    writes = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            for t in ast.walk(target):
                if (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                        and t.value.id in ("session", "s", "slot_session") and t.attr.startswith("_")):
                    writes.append(f"line {t.lineno}: {t.value.id}.{t.attr}")
    assert writes == [], writes
