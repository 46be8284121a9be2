"""Single-node routing's choice (spark/routing.py): one node, the same for any order of the same
peer list, and only a departed node changes it. Pure functions; no SparkSession."""

from __future__ import annotations

import pytest

from pyspark_s2s.spark.routing import single_node_of


def test_the_same_node_for_every_order_of_the_peer_list() -> None:
    nodes = ["nifi-2:8443", "nifi-10:8443", "nifi-1:9443", "nifi-1:8443"]
    assert single_node_of(nodes) == "nifi-1:8443"
    assert single_node_of(list(reversed(nodes))) == "nifi-1:8443"
    assert single_node_of([*nodes, "nifi-1:8443"]) == "nifi-1:8443"


def test_ports_compare_as_numbers() -> None:
    assert single_node_of(["127.0.0.1:10000", "127.0.0.1:9999"]) == "127.0.0.1:9999"


def test_only_the_chosen_node_leaving_changes_the_choice() -> None:
    nodes = ["b:1", "a:2", "c:3"]
    assert single_node_of([n for n in nodes if n != "c:3"]) == single_node_of(nodes) == "a:2"
    assert single_node_of([n for n in nodes if n != "a:2"]) == "b:1"


def test_no_node_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one node"):
        single_node_of([])
