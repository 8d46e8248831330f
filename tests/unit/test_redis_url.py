"""Redis URLs (orchestrator/config/redis_url.py): a Sentinel URL is read into its parts, and each
wrong part is refused with a line that names it."""

from __future__ import annotations

import pytest

from orchestrator.config.redis_url import (
    DEFAULT_NODE_PORT,
    DEFAULT_SENTINEL_PORT,
    ClusterUrl,
    RedisTopology,
    SentinelUrl,
    check_redis_url,
    parse_cluster_url,
    parse_sentinel_url,
    topology_of,
)


def test_a_sentinel_url_names_the_sentinels_service_database_and_credentials() -> None:
    url = "redis+sentinel://keel:p%40ss@s1:26380,s2,[::1]:26381/mymaster/3?sentinel_password=sp"
    assert parse_sentinel_url(url) == SentinelUrl(
        sentinels=(("s1", 26380), ("s2", DEFAULT_SENTINEL_PORT), ("::1", 26381)),
        service="mymaster",
        db=3,
        username="keel",
        password="p@ss",
        sentinel_password="sp",
        tls=False,
    )
    assert topology_of(url) is RedisTopology.SENTINEL


def test_the_database_defaults_to_0_and_rediss_means_tls() -> None:
    parsed = parse_sentinel_url("rediss+sentinel://:pw@s1:26379/keel-redis")
    assert (parsed.db, parsed.tls, parsed.username, parsed.password) == (0, True, None, "pw")
    assert parse_sentinel_url("redis+sentinel://s1/m/").db == 0


def test_passwords_stay_out_of_the_repr() -> None:
    shown = repr(parse_sentinel_url("redis+sentinel://u:S3cr3t@s1/m/0?sentinel_password=T0p"))
    assert "S3cr3t" not in shown and "T0p" not in shown
    assert "sentinels=(('s1', 26379),)" in shown


@pytest.mark.parametrize(
    "url", ["redis://h:6379/0", "rediss://h/1", "unix:///run/redis.sock", "redis+sentinelx://h"]
)
def test_other_urls_name_one_server(url: str) -> None:
    assert topology_of(url) is RedisTopology.SINGLE


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "sentinel://s1:26379/m/0",
            "must start with redis://, rediss://, unix://, redis+sentinel://, "
            "rediss+sentinel://, redis+cluster:// or rediss+cluster://",
        ),
        (
            "redis+sentinel:///mymaster/0",
            "a redis+sentinel:// URL names at least one sentinel, "
            "e.g. redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/mymaster/0",
        ),
        (
            "rediss+sentinel://:pw@/mymaster",
            "a rediss+sentinel:// URL names at least one sentinel, "
            "e.g. rediss+sentinel://10.0.0.1:26379,10.0.0.2:26379/mymaster/0",
        ),
        (
            "redis+sentinel://s1:26379",
            "a redis+sentinel:// URL names the master's service after the sentinels, "
            "e.g. redis+sentinel://10.0.0.1:26379/mymaster/0",
        ),
        (
            "redis+sentinel://s1:26379//0",
            "a redis+sentinel:// URL names the master's service after the sentinels, "
            "e.g. redis+sentinel://10.0.0.1:26379/mymaster/0",
        ),
        ("redis+sentinel://s1,:26379/m", "the sentinel address ':26379' has no host"),
        ("redis+sentinel://s1,,s2/m", "the sentinel address '' has no host"),
        ("redis+sentinel://s1:abc/m", "the port 'abc' is not a number from 1 to 65535"),
        ("redis+sentinel://s1:0/m", "the port '0' is not a number from 1 to 65535"),
        ("redis+sentinel://[::1/m", "the sentinel address '[::1' has no closing ']'"),
        ("redis+sentinel://[::1]x/m", "the sentinel address '[::1]x' has text after its ']'"),
        (
            "redis+sentinel://s1/my master",
            "the service name 'my master' may hold only letters, digits, '.', '_' and '-'",
        ),
        (
            "redis+sentinel://s1/mymaster/zero",
            "the database 'zero' (after the service name) is not a number",
        ),
        (
            "redis+sentinel://s1/mymaster/0/1",
            "the database '0/1' (after the service name) is not a number",
        ),
        (
            "redis+sentinel://s1/mymaster/0?socket_timeout=1",
            "?socket_timeout is not an option of a redis+sentinel:// URL "
            "(it takes only sentinel_password)",
        ),
    ],
)
def test_each_wrong_part_of_a_sentinel_url_is_named(url: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        check_redis_url(url)
    assert str(info.value) == message


def test_a_long_bad_part_is_quoted_clipped() -> None:
    with pytest.raises(ValueError) as info:
        check_redis_url("redis+sentinel://s1/" + "x" * 300 + "!")
    assert "(301 characters)" in str(info.value) and len(str(info.value)) < 320


def test_a_cluster_url_names_its_start_nodes_and_credentials() -> None:
    url = "rediss+cluster://keel:p%40ss@n1:7000,n2,[::1]:7002/"
    assert parse_cluster_url(url) == ClusterUrl(
        nodes=(("n1", 7000), ("n2", DEFAULT_NODE_PORT), ("::1", 7002)),
        username="keel",
        password="p@ss",
        tls=True,
    )
    assert topology_of(url) is RedisTopology.CLUSTER
    assert "p@ss" not in repr(parse_cluster_url(url))
    assert parse_cluster_url("redis+cluster://n1:7000/0").nodes == (("n1", 7000),)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "redis+cluster:///",
            "a redis+cluster:// URL names at least one node, "
            "e.g. redis+cluster://10.0.0.1:7000,10.0.0.2:7000/",
        ),
        (
            "redis+cluster://n1:7000/2",
            "a redis+cluster:// URL names no database (a cluster has database 0 only), not '2'",
        ),
        ("redis+cluster://n1,:7000/", "the node address ':7000' has no host"),
        ("redis+cluster://n1:0/", "the port '0' is not a number from 1 to 65535"),
        (
            "redis+cluster://n1/?socket_timeout=1",
            "a redis+cluster:// URL takes no ?options (Keel sets the client's own)",
        ),
    ],
)
def test_each_wrong_part_of_a_cluster_url_is_named(url: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        check_redis_url(url)
    assert str(info.value) == message
