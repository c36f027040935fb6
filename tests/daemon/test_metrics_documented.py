"""docs/api.md lists every series the daemon's /metrics serves."""

from __future__ import annotations

import pathlib
import re

from renderd.daemon.metrics import Metrics

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "api.md"


def test_every_metric_family_is_documented():
    metrics = Metrics(lambda: {"demo": {"states": {"READY": 1}, "leases": 0, "wanted": 1}})
    metrics.declare("demo")
    text = metrics.render().decode()
    families = set(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    doc = DOC.read_text()
    documented = set(re.findall(r"^\| `(renderd_[a-z_]+)`", doc, re.M))
    names = {name for name, _kind in families if not name.endswith("_created")}
    assert names, text
    assert names <= documented, f"in /metrics, not in docs/api.md: {sorted(names - documented)}"
    assert documented <= names, f"in docs/api.md, not in /metrics: {sorted(documented - names)}"
    if any(name.endswith("_created") for name, _kind in families):
        assert "`_created`" in doc, "/metrics serves _created series that docs/api.md does not explain"
