"""Peers: NiFi's weights, weighted selection, penalization, persistence (docs/protocol.md §9, §12
items 35-39, and the selector's side of item 40)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from pyspark_s2s.errors import ProtocolError
from pyspark_s2s.protocol.codes import Direction
from pyspark_s2s.protocol.peers import (
    PeerSelector,
    PeerStatus,
    format_peer_file,
    normalized_weight,
    parse_peer_file,
    peer_weights,
    peers_from_response,
)

SEND, RECEIVE = Direction.SEND, Direction.RECEIVE
DRAWS = 10_000


def cluster(*counts: int) -> list[PeerStatus]:
    return [PeerStatus(f"node{i}", 8080, False, c) for i, c in enumerate(counts)]


def draw(selector: PeerSelector, direction: Direction, now: float = 0.0, n: int = DRAWS) -> Counter[str]:
    hits: Counter[str] = Counter()
    for _ in range(n):
        peer = selector.select(direction, now)
        assert peer is not None
        hits[peer.hostname] += 1
    return hits


def assert_distribution(hits: Counter[str], expected_pct: dict[str, float], tolerance: float) -> None:
    """Observed percentages within ``tolerance`` (relative) of the expected ones; 0 % -> never."""
    total = sum(hits.values())
    for host, pct in expected_pct.items():
        observed = 100.0 * hits[host] / total
        if pct == 0:
            assert hits[host] == 0, (host, observed)
        else:
            assert abs(observed - pct) <= pct * tolerance, (host, observed, pct)


def expected_from_weights(weights: dict[tuple[str, int], float]) -> dict[str, float]:
    total = sum(weights.values())
    return {host: 100.0 * w / total for (host, _), w in weights.items()}


# -- weights (items 35, 36) ---------------------------------------------------------------------


def test_weights_20_30_50() -> None:
    peers = cluster(20, 30, 50)
    assert list(peer_weights(peers, SEND).values()) == [40.0, 35.0, 25.0]
    assert list(peer_weights(peers, RECEIVE).values()) == [20.0, 30.0, 50.0]


@pytest.mark.parametrize("count", [0, 1, 12345])
def test_single_peer_gets_100_both_ways(count: int) -> None:
    for direction in (SEND, RECEIVE):
        assert peer_weights(cluster(count), direction) == {("node0", 8080): 100.0}


@pytest.mark.parametrize("nodes", [3, 5, 7])
def test_normalized_weight_bounds(nodes: int) -> None:
    rng = random.Random(nodes)
    for _ in range(200):
        peers = cluster(*(rng.randint(0, 10_000) for _ in range(nodes)))
        for w in peer_weights(peers, SEND).values():
            assert 0 <= w <= 80
        for w in peer_weights(peers, RECEIVE).values():
            assert 0 <= w <= 100


def test_weights_are_floored_to_two_decimals() -> None:
    assert normalized_weight(SEND, 0, 0, 3) == 33.33
    assert normalized_weight(RECEIVE, 0, 0, 7) == 14.28
    assert normalized_weight(RECEIVE, 3, 2, 2) == 66.66  # floor, not round (66.67)
    assert normalized_weight(SEND, 3, 1, 2) == 66.66
    assert normalized_weight(RECEIVE, 200, 1, 50) == 0.5
    assert normalized_weight(SEND, 200, 151, 50) == 0.5  # (1 - 151/200) / 49


SCENARIOS = {
    "100/0/0": (100, 0, 0),
    "50/50/0": (50, 50, 0),
    "333/333/334": (333, 333, 334),
    "0/250x4": (0, 250, 250, 250, 250),
    "142x7": (142,) * 7,
    "151+1x49": (151,) + (1,) * 49,
}


@pytest.mark.parametrize("name", SCENARIOS)
@pytest.mark.parametrize("direction", [SEND, RECEIVE])
def test_scenario_weights_sum_to_99_100(name: str, direction: Direction) -> None:
    total = sum(peer_weights(cluster(*SCENARIOS[name]), direction).values())
    assert 99.0 <= total <= 100.0, total


def test_scenario_weights_follow_load() -> None:
    assert list(peer_weights(cluster(100, 0, 0), RECEIVE).values()) == [100.0, 0.0, 0.0]
    assert list(peer_weights(cluster(100, 0, 0), SEND).values()) == [0.0, 50.0, 50.0]
    assert list(peer_weights(cluster(0, 250, 250, 250, 250), SEND).values()) == [25.0] + [18.75] * 4
    assert set(peer_weights(cluster(*(142,) * 7), SEND).values()) == {14.28}


def test_duplicate_peers_count_once() -> None:
    peers = [*cluster(20, 30, 50), PeerStatus("node0", 8080, True, 999)]
    assert peer_weights(peers, RECEIVE) == peer_weights(cluster(20, 30, 50), RECEIVE)


# -- selection (item 37) -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "counts",
    [(20, 30, 50), (100, 0, 0), (50, 50, 0), (333, 333, 334), (0, 250, 250, 250, 250), (142,) * 7],
)
@pytest.mark.parametrize("direction", [SEND, RECEIVE])
def test_draws_match_weights(counts: tuple[int, ...], direction: Direction) -> None:
    peers = cluster(*counts)
    selector = PeerSelector(random.Random(sum(counts) + len(counts)))
    selector.set_peers(peers, now=0.0)
    hits = draw(selector, direction)
    assert_distribution(hits, expected_from_weights(peer_weights(peers, direction)), 0.05)


def test_draws_20_30_50_match_nifi_percentages() -> None:
    selector = PeerSelector(random.Random(7))
    selector.set_peers(cluster(20, 30, 50), now=0.0)
    assert_distribution(draw(selector, SEND), {"node0": 40, "node1": 35, "node2": 25}, 0.05)
    assert_distribution(draw(selector, RECEIVE), {"node0": 20, "node1": 30, "node2": 50}, 0.05)


@pytest.mark.parametrize("direction", [SEND, RECEIVE])
def test_balanced_ten_node_cluster(direction: Direction) -> None:
    selector = PeerSelector(random.Random(10))
    selector.set_peers(cluster(*(100,) * 10), now=0.0)
    assert_distribution(draw(selector, direction), {f"node{i}": 10.0 for i in range(10)}, 0.10)


def test_single_valid_destination_always_chosen() -> None:
    selector = PeerSelector(random.Random(1))
    selector.set_peers(cluster(5), now=0.0)
    assert draw(selector, SEND, n=500) == Counter({"node0": 500})
    # a zero-weight peer is still chosen when it is the only one not penalized
    selector.set_peers(cluster(100, 0), now=0.0)  # SEND weights: node0 0, node1 100
    selector.penalize(("node1", 8080), until=10.0)
    assert draw(selector, SEND, n=500) == Counter({"node0": 500})


class FixedRandom:
    def __init__(self, *values: float) -> None:
        self.values = list(values)

    def random(self) -> float:
        return self.values.pop(0)


def test_walk_is_heaviest_first_with_r_at_most_cumulative() -> None:
    selector = PeerSelector(FixedRandom(0.0, 0.5, 0.5000001, 0.9999999))
    selector.set_peers(cluster(20, 30, 50), now=0.0)  # RECEIVE order: node2 50, node1 30, node0 20
    picks = [selector.select(RECEIVE, 0.0) for _ in range(4)]
    assert [p.hostname if p else None for p in picks] == ["node2", "node2", "node1", "node0"]


# -- penalization (item 38) ----------------------------------------------------------------------


def test_one_of_two_penalized_goes_to_the_other() -> None:
    selector = PeerSelector(random.Random(2))
    selector.set_peers(cluster(10, 10), now=0.0)
    selector.penalize(("node0", 8080), until=100.0)
    for direction in (SEND, RECEIVE):
        assert draw(selector, direction, now=50.0, n=1000) == Counter({"node1": 1000})


def test_two_of_four_penalized_splits_the_rest() -> None:
    selector = PeerSelector(random.Random(4))
    peers = cluster(0, 0, 0, 0)
    selector.set_peers(peers, now=0.0)
    selector.penalize(peers[0], until=100.0)
    selector.penalize(peers[2], until=100.0)
    hits = draw(selector, SEND, now=1.0)
    assert set(hits) == {"node1", "node3"}
    assert_distribution(hits, {"node1": 50.0, "node3": 50.0}, 0.05)


def test_penalty_expiry_is_max_and_strict() -> None:
    selector = PeerSelector(random.Random(0))
    key = ("node0", 8080)
    assert not selector.is_penalized(key, 0.0)
    selector.penalize(key, until=10.0)
    selector.penalize(key, until=5.0)  # an earlier expiry does not shorten the penalty
    assert selector.penalized_until(key) == 10.0
    assert selector.is_penalized(key, 9.999)
    assert not selector.is_penalized(key, 10.0)
    selector.penalize(PeerStatus("node0", 8080, True, 3), until=20.0)
    assert selector.is_penalized(key, 15.0)


def test_all_penalized_or_empty_gives_none() -> None:
    selector = PeerSelector(random.Random(0))
    assert selector.select(SEND, 0.0) is None
    selector.set_peers(cluster(1, 2), now=0.0)
    for peer in selector.peers:
        selector.penalize(peer, until=3.0)
    assert selector.select(SEND, 1.0) is None
    assert selector.available(1.0) == []
    assert selector.select(SEND, 3.0) is not None  # penalties end
    assert selector.penalized_until(("node0", 8080)) is None  # and are forgotten


def test_penalties_survive_a_refresh() -> None:
    selector = PeerSelector(random.Random(0))
    selector.set_peers(cluster(1, 1), now=0.0)
    selector.penalize(("node0", 8080), until=30.0)
    selector.set_peers(cluster(5, 5), now=10.0)
    assert selector.weights(RECEIVE, 20.0) == {("node1", 8080): 50.0}


# -- cache and the selector's side of item 40 ------------------------------------------------------


def test_cache_expiry() -> None:
    selector = PeerSelector(random.Random(0))
    assert selector.is_expired(0.0) and selector.fetched_at is None
    selector.set_peers(cluster(1), now=100.0)
    assert selector.fetched_at == 100.0
    assert not selector.is_expired(160.0)  # PEER_CACHE_SECONDS = 60
    assert selector.is_expired(160.001)
    assert not selector.is_expired(104.0, cache_seconds=5)
    assert selector.is_expired(105.5, cache_seconds=5)


def test_bootstrap_down_then_back() -> None:
    bootstrap, node2 = PeerStatus("bootstrap", 8080, False, 0), PeerStatus("node2", 8080, False, 0)
    selector = PeerSelector(random.Random(40))
    selector.set_peers([bootstrap, node2], now=0.0)
    selector.penalize(bootstrap, until=3.0)  # the client failed to reach it
    assert {selector.select(SEND, 1.0).hostname for _ in range(50)} == {"node2"}  # type: ignore[union-attr]
    selector.penalize(node2, until=3.0)  # nothing reachable
    assert selector.select(SEND, 2.0) is None
    # the (expired) list stays in use until a refresh; the bootstrap is chosen again once back
    assert selector.is_expired(100.0)
    assert "bootstrap" in {selector.select(SEND, 100.0).hostname for _ in range(50)}  # type: ignore[union-attr]


# -- PeerStatus ------------------------------------------------------------------------------------


def test_peer_status_key_url_and_dto() -> None:
    peer = PeerStatus("nifi-1", 8443, True, 12)
    assert peer.key == ("nifi-1", 8443)
    assert peer.api_url == "https://nifi-1:8443/nifi-api"
    assert peer.query_for_peers is True
    dto = {"hostname": "nifi-1", "port": 8443, "secure": True, "flowFileCount": 12}
    assert peer.to_dto() == dto
    assert PeerStatus.from_dto(dto) == peer
    assert PeerStatus.from_dto({"hostname": "h", "port": 1, "secure": False}).flow_file_count == 0
    assert peers_from_response({"peers": [dto]}) == [peer]
    assert peers_from_response({"peers": []}) == []


@pytest.mark.parametrize(
    "obj",
    [
        None,
        [],
        {"port": 1, "secure": False},
        {"hostname": "", "port": 1, "secure": False},
        {"hostname": "h", "port": "1", "secure": False},
        {"hostname": "h", "port": 0, "secure": False},
        {"hostname": "h", "port": True, "secure": False},
        {"hostname": "h", "port": 1, "secure": "true"},
        {"hostname": "h", "port": 1, "secure": False, "flowFileCount": 1.5},
    ],
)
def test_peer_dto_rejects_wrong_shapes(obj: object) -> None:
    with pytest.raises(ProtocolError):
        PeerStatus.from_dto(obj)


def test_peers_response_without_array() -> None:
    with pytest.raises(ProtocolError, match="peers"):
        peers_from_response({"peer": []})


# -- persistence (item 39) -----------------------------------------------------------------------

URLS = ["http://bootstrap:8080/nifi-api", "http://node2:8080/nifi-api"]


def test_format_peer_file_exact_text() -> None:
    peers = [PeerStatus("node1", 8443, True, 7), PeerStatus("node2", 8443, True, 0, False)]
    assert format_peer_file("HTTP", ["https://node1:8443/nifi-api"], peers) == (
        "HTTP\n"
        "Remote Instance URIs: https://node1:8443/nifi-api\n"
        "node1:8443:true:true\n"
        "node2:8443:true:false\n"
    )
    with pytest.raises(ValueError):
        format_peer_file("http", [], peers)


def test_round_trip_restores_bootstrap_and_three_peers_with_count_1() -> None:
    peers = [PeerStatus("bootstrap", 8080, False, 40)] + [
        PeerStatus(f"node{i}", 8080 + i, False, 10 * i) for i in (1, 2, 3)
    ]
    text = format_peer_file("HTTP", URLS, peers)
    restored = parse_peer_file(text, "HTTP", URLS)
    assert restored == [PeerStatus(p.hostname, p.port, p.secure, 1, True) for p in peers]
    # equal weights after a restore
    assert set(peer_weights(restored, SEND).values()) == {25.0}


def test_expired_file_used_until_refresh_then_only_bootstrap() -> None:
    text = format_peer_file("HTTP", URLS, cluster(1, 2, 3))
    file_mtime = 1000.0
    restored = parse_peer_file(text, "HTTP", URLS)
    assert restored is not None
    selector = PeerSelector(random.Random(39))
    selector.set_peers(restored, now=file_mtime)
    now = file_mtime + 3600
    assert selector.is_expired(now)
    assert selector.select(RECEIVE, now) is not None  # still used
    selector.set_peers([PeerStatus("bootstrap", 8080, False, 0)], now=now)  # refresh result
    assert {selector.select(RECEIVE, now).hostname for _ in range(20)} == {"bootstrap"}  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "WRONG\nRemote Instance URIs: {urls}\nh:1:true:true\n",
        "http\nRemote Instance URIs: {urls}\nh:1:true:true\n",
        "HTTP\nh:1:true:true\n",  # URI line missing
        "HTTP\n",
        "HTTP\nRemote Instance URIs: http://other:8080/nifi-api\nh:1:true:true\n",
        "RAW\nRemote Instance URIs: {urls}\nh:1:true:true\n",  # other protocol
        "HTTP\nRemote Instance URIs: {urls}\n",  # no peers
        "HTTP\nRemote Instance URIs: {urls}\nonly:two\n:1:true\nh:x:true\nh:1:2:3:4\n",
    ],
)
def test_discarded_files(text: str) -> None:
    assert parse_peer_file(text.format(urls=",".join(URLS)), "HTTP", URLS) is None


def test_peer_line_variants() -> None:
    text = (
        "HTTP\r\n"
        f"Remote Instance URIs: {','.join(URLS)}\r\n"
        "a:1:true\r\n"  # 3 fields: queryForPeers false
        "b:2:TRUE:True\r\n"
        "c:3:yes:no\r\n"  # Java booleans: anything but "true" is false
        "d:4:true:\r\n"  # trailing empty field dropped by Java's split -> 3 fields
        "garbage\r\n"
        "e:5:true:true:extra\r\n"
        "a:1:false:false\r\n"  # duplicate key: first wins
    )
    assert parse_peer_file(text, "HTTP", URLS) == [
        PeerStatus("a", 1, True, 1, False),
        PeerStatus("b", 2, True, 1, True),
        PeerStatus("c", 3, False, 1, False),
        PeerStatus("d", 4, True, 1, False),
    ]


def test_raw_protocol_file() -> None:
    text = format_peer_file("RAW", URLS, cluster(1))
    assert parse_peer_file(text, "RAW", URLS) == [PeerStatus("node0", 8080, False, 1, True)]
    assert parse_peer_file(text, "HTTP", URLS) is None
