"""Every test gets its own books for the outside world (``SHOP_DB``)."""

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def books(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "shop.db"
    monkeypatch.setenv("SHOP_DB", str(path))
    return path
