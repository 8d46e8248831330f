"""KRaft storage formatting accepts every cluster id our generator can produce."""

from __future__ import annotations

import shutil

import ops.local
from ops.local import LocalStack
from tests.conftest import KEEL_DIR, stack_settings


def test_a_cluster_id_starting_with_a_dash_formats(tmp_path, monkeypatch):
    # base64url ids start with "-" one time in 64; argparse once took that for an option.
    monkeypatch.setattr(ops.local, "_kafka_cluster_id", lambda: "-AbCdEfGhIjKlMnOpQrStu")
    stack = LocalStack(stack_settings(tmp_path, 28092, 26381), with_redis=False)
    stack._prepare_kafka_storage(shutil.which("java"), KEEL_DIR / "kafka-libs")
    meta = (stack.node_dir(1) / "data" / "meta.properties").read_text()
    assert "cluster.id=-AbCdEfGhIjKlMnOpQrStu" in meta
