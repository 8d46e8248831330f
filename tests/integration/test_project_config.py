"""``keel projections rebuild`` in a user's project whose application lacks a recorded
workflow refuses, names it, and writes or deletes no Redis key (issue 46, item 4)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support import wait_until

ROOT = Path(__file__).resolve().parents[2]


def _keys(settings) -> dict[bytes, bytes | None]:
    """Every Redis key of the test's prefix with its serialized value."""
    import redis

    r = redis.Redis.from_url(settings.redis)
    try:
        return {k: r.dump(k) for k in r.scan_iter(match=f"keel:{settings.topic_prefix}:*")}
    finally:
        r.close()


def test_rebuild_with_an_app_lacking_a_recorded_workflow_refuses_and_changes_nothing(
    settings, services, client, tmp_path
):
    services.start("orchestrator")
    services.start("worker")
    client.start_many("parallel_checks", [(f"pc-{i}", {"n": i}) for i in range(3)])
    wait_until(lambda: client.projection.counts()["completed"] == 3, 120, "3 completions")
    services.stop_all()  # no projector writes from here on
    project = tmp_path / "shop"
    (project / "sub").mkdir(parents=True)
    (project / "pyproject.toml").write_text(
        '[project]\nname = "shop"\n\n[tool.keel]\napp = "shop:app"\n'
    )
    (project / "shop.py").write_text("from tests.integration.queries_app import app\n")
    before = _keys(settings)
    assert before
    rebuilt = subprocess.run(
        [sys.executable, "-m", "orchestrator", "projections", "rebuild"],
        cwd=project / "sub",  # the project is found upwards, shop.py beside its file
        env=settings.child_environment(PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert rebuilt.returncode == 1, rebuilt.stderr
    assert "refusing to rebuild" in rebuilt.stderr
    assert "'parallel_checks' v1 (3 run(s)), which shop:app does not define" in rebuilt.stderr
    assert "Traceback" not in rebuilt.stderr
    assert _keys(settings) == before
