"""The command line of docs/contracts.md, parsed into settings."""

from __future__ import annotations

import pytest

from prefixroute.cli import build_parser
from prefixroute.router.cli import new_event_loop, settings_from_args


def parse(*argv: str):
    return build_parser(only="router").parse_args(["router", *argv])


def test_contract_flags() -> None:
    args = parse(
        "--host",
        "10.0.0.5",
        "--port",
        "8000",
        "--backends",
        "http://a:1,http://b:2",
        "--strategy",
        "prefix-hash",
        "--block-size",
        "128",
        "--prefix-blocks",
        "2",
        "--load-factor",
        "1.5",
        "--virtual-nodes",
        "64",
        "--tenant-header",
        "X-Tenant",
        "--isolate-tenants",
        "--retries",
        "1",
        "--max-body-bytes",
        "1000",
        "--scrape-interval",
        "2",
    )
    s = settings_from_args(args)
    assert (s.host, s.port, s.backends) == ("10.0.0.5", 8000, ("http://a:1", "http://b:2"))
    r = s.routing
    assert (r.strategy, r.block_size, r.prefix_blocks, r.load_factor, r.virtual_nodes, r.isolate_tenants) == (
        "prefix-hash",
        128,
        2,
        1.5,
        64,
        True,
    )
    assert (s.gate.tenant_header, s.retries, s.max_body_bytes, s.scrape_interval) == ("X-Tenant", 1, 1000, 2.0)


def test_sources_are_exclusive_and_required() -> None:
    assert settings_from_args(parse("--ring-file", "/r.yaml")).ring_file == "/r.yaml"
    assert settings_from_args(parse("--resource", "ns/name")).resource == "ns/name"
    with pytest.raises(SystemExit):
        parse()
    with pytest.raises(SystemExit):
        parse("--backends", "http://a", "--ring-file", "r")


def test_bad_values_are_refused() -> None:
    with pytest.raises(ValueError, match=r"^--resource must be NAMESPACE/NAME"):
        settings_from_args(parse("--resource", "no-slash"))
    with pytest.raises(ValueError, match=r"^--load-factor: load factor must be at least 1\.0"):
        settings_from_args(parse("--backends", "http://a", "--load-factor", "0.5"))
    with pytest.raises(SystemExit):
        parse("--backends", "http://a", "--strategy", "magic")


async def test_the_command_serves_and_stops_cleanly(engines, tmp_path) -> None:
    """`prefixroute router` as a real process: ready, routes, exits 0 on SIGTERM."""
    import asyncio
    import signal

    import aiohttp
    import yaml

    from prefixroute.bench.local_fleet import router_command
    from prefixroute.processes import Child, free_port

    (engine,) = await engines(1)
    ring = tmp_path / "ring.yaml"
    ring.write_text(yaml.safe_dump({"version": "1", "members": [{"pod": "p0", "address": f"127.0.0.1:{engine.port}"}]}))
    port = free_port()
    router = Child(
        "router",
        router_command(port, "--ring-file", str(ring), "--log-level", "WARNING"),
        tmp_path / "router.log",
        port,
    )
    router.start()
    try:
        await router.wait_http_async("/ready", timeout=30)
        async with aiohttp.ClientSession() as session:
            async with session.post(router.url + "/v1/completions", json={"prompt": "hello"}) as r:
                assert r.status == 200
                assert r.headers["X-Prefixroute-Member"] == "p0"
    finally:
        router.signal(signal.SIGTERM)
        assert router.popen is not None
        code = await asyncio.to_thread(router.popen.wait, 30)
    assert code == 0, router.tail()


def test_the_native_client_is_the_default_and_aiohttp_stays_selectable() -> None:
    assert settings_from_args(parse("--backends", "http://a")).upstream_client == "native"
    assert settings_from_args(parse("--backends", "http://a", "--upstream-client", "aiohttp")).upstream_client == (
        "aiohttp"
    )
    with pytest.raises(SystemExit):
        parse("--backends", "http://a", "--upstream-client", "curl")


def test_uvloop_runs_the_router_when_installed() -> None:
    """The `fast` extra is installed with the tests, so the router's loop must be uvloop's."""
    uvloop = pytest.importorskip("uvloop")
    loop = new_event_loop()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()


def test_peer_flags() -> None:
    s = settings_from_args(parse("--resource", "ns/m", "--peer-port", "9200", "--peers-service", "ns/m-router"))
    assert (s.peers.port, s.peers.service, s.peers.peers, s.peers.enabled) == (9200, "ns/m-router", (), True)
    s = settings_from_args(
        parse("--backends", "http://a", "--peer-port", "9200", "--peers", "tcp://b:9200,tcp://c:9200")
    )
    assert s.peers.peers == ("tcp://b:9200", "tcp://c:9200")
    assert not settings_from_args(parse("--backends", "http://a")).peers.enabled
    with pytest.raises(ValueError, match="--peer-port"):
        settings_from_args(parse("--backends", "http://a", "--peers", "tcp://b:9200"))
