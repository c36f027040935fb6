"""Contract checks (design.md, "Files"): the systemd unit's settings that the public contract fixes."""

from __future__ import annotations

from pathlib import Path

UNIT = Path(__file__).resolve().parent.parent / "systemd" / "renderd.service"


def _settings(section: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    current = None
    for raw in UNIT.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = line
            continue
        if current == section:
            key, _, value = line.partition("=")
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def test_the_unit_has_the_settings_the_contract_fixes():
    service = _settings("[Service]")
    assert service.get("Type") == ["notify"]
    assert service.get("KillMode") == ["mixed"]
    assert service.get("RuntimeDirectory") == ["renderd"]
    assert service.get("RuntimeDirectoryMode") == ["0700"]  # the socket's and the pipes' directory
    (reload,) = service["ExecReload"]
    assert reload.split()[-2:] == ["-HUP", "$MAINPID"] and reload.split()[0].endswith("/kill"), reload
    (start,) = service["ExecStart"]
    assert start.split()[1] == "start" and start.split()[0].endswith("/renderd"), start
