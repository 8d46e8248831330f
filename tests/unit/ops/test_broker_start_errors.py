"""A broker that dies while starting is reported with the reason from its own log.

Its stdout is empty (log4j writes ``server.log``); the first ERROR there and the
innermost cause under it name what went wrong, e.g. a port taken between the check
and the bind.
"""

from __future__ import annotations

from ops.local import _first_error

LOG = """\
[2026-11-30 14:16:13,126] INFO [BrokerLifecycleManager id=1] The broker has caught up. (x)
[2026-11-30 14:16:13,392] ERROR Unable to start acceptor for PLAINTEXT (kafka.network.DataPlaneAcceptor)
org.apache.kafka.common.KafkaException: Socket server failed to bind to 127.0.0.1:47392: Address already in use.
\tat kafka.network.Acceptor.openServerSocket(SocketServer.scala:749)
Caused by: java.net.BindException: Address already in use
\tat java.base/sun.nio.ch.Net.bind0(Native Method)
[2026-11-30 14:16:13,395] ERROR [BrokerServer id=1] Received a fatal error (kafka.server.BrokerServer)
Caused by: java.lang.RuntimeException: Unable to start acceptor for PLAINTEXT
"""


def test_the_first_error_and_its_innermost_cause_are_reported(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(LOG)
    assert _first_error(log) == (
        "Unable to start acceptor for PLAINTEXT (kafka.network.DataPlaneAcceptor); "
        "Caused by: java.net.BindException: Address already in use"
    )


def test_no_error_or_no_log_reports_nothing(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(LOG.splitlines()[0] + "\n")
    assert _first_error(log) is None
    assert _first_error(tmp_path / "missing.log") is None
