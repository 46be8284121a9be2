"""``--data-dir``: what the server acknowledged survives a crash (SIGKILL) and a restart."""

from __future__ import annotations

import time
from pathlib import Path

from s2shelp import RECEIVE, S2S, SEND, decode, encode
from serverproc import ServerProcess, ServerThread

ARGS = ("--input-port", "in", "--output-port", "out", "--route", "in=out", "--input-port", "solo")


def _contents(srv, port: str) -> list[bytes]:
    return [f["content"] for f in srv.admin.flowfiles(port)]


def test_acknowledged_flowfiles_survive_a_crash(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    srv = ServerProcess(*ARGS, "--data-dir", data, "--nodes", "2").start()
    try:
        client = S2S(srv.api())
        srv.admin.enqueue("out", [({"n": "a"}, b"admin-a"), ({"n": "b"}, b"admin-b")])
        big = bytes(range(256)) * 8192  # 2 MiB: spooled content
        assert client.send(srv.port_id("in"), [({"n": "c"}, b"sent-c"), ({"n": "d"}, big)]).response_code == 13
        assert client.send(srv.port_id("solo"), [({"n": "s"}, b"solo")]).response_code == 13
        srv.admin.enqueue("out", [({"n": "x"}, b"node1")], node=1)
        # committed receive: gone for good
        tx = client.open(RECEIVE, srv.port_id("out"), {"x-nifi-site-to-site-batch-count": "1"})
        packets, crc = decode(client.download(tx, {"x-nifi-site-to-site-batch-count": "1"}).content)
        assert [p.content for p in packets] == [b"admin-a"]
        assert client.commit(tx, 12, crc).status_code == 200
        # downloaded but not committed: must come back after the crash
        tx = client.open(RECEIVE, srv.port_id("out"), {"x-nifi-site-to-site-batch-count": "1"})
        assert client.download(tx, {"x-nifi-site-to-site-batch-count": "1"}).status_code == 202
        # uploaded but not committed: must not appear
        tx = client.open(SEND, srv.port_id("in"))
        assert client.upload(tx, encode([({}, b"never")])[0]).status_code == 202
        client.close()
    finally:
        srv.kill()

    with ServerProcess(*ARGS, "--data-dir", data, "--nodes", "2") as again:
        assert _contents(again, "out") == [b"admin-b", b"sent-c", big]
        assert [f["attributes"]["n"] for f in again.admin.flowfiles("out")] == ["b", "c", "d"]
        assert _contents(again, "solo") == [b"solo"]
        assert again.admin.flowfiles("out", node=1)[0]["content"] == b"node1"
        got = S2S(again.api()).receive(again.port_id("out"))
        assert [p.content for p in got] == [b"admin-b", b"sent-c", big]
        assert again.admin.queued("out", node=0) == 0
        assert again.stop() == 0

    with ServerThread(*ARGS, "--data-dir", data, "--nodes", "2") as third:
        assert third.admin.queued("out", node=0) == 0
        assert third.admin.queued("out", node=1) == 1
        assert third.admin.queued("solo") == 1


def test_snapshots_and_torn_journal_tail(tmp_path: Path) -> None:
    data = tmp_path / "data"
    srv = ServerProcess(*ARGS, "--data-dir", str(data), "--snapshot-every", "3").start()
    try:
        for i in range(10):
            srv.admin.enqueue("solo", [({"i": str(i)}, f"ff{i}".encode())])
    finally:
        srv.kill()
    node = data / "node-0"
    assert (node / "snapshot.json").exists()
    with open(node / "journal.log", "ab") as fh:
        fh.write(b'{"seq": 999, "op": "add", "port": "solo", "it')  # crash in the middle of a record
    with ServerThread(*ARGS, "--data-dir", str(data), "--snapshot-every", "3") as again:
        assert _contents(again, "solo") == [f"ff{i}".encode() for i in range(10)]
        drained = again.admin.flowfiles("solo", drain=True)
        assert len(drained) == 10
    with ServerThread(*ARGS, "--data-dir", str(data)) as third:
        assert third.admin.queued("solo") == 0
        assert list((node / "content").iterdir()) == []


def test_reset_and_removed_node_forget_durable_state(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with ServerThread(*ARGS, "--data-dir", str(data), "--nodes", "2") as srv:
        srv.admin.enqueue("solo", count=2, size=10)
        srv.admin.enqueue("solo", count=1, size=10, node=1)
        srv.admin.reset()
        srv.admin.enqueue("out", count=1, size=5)
        srv.admin.remove_node(1)  # carried out just after the answer
        for _ in range(100):
            if [n["index"] for n in srv.admin.nodes()] == [0]:
                break
            time.sleep(0.05)
    assert not (data / "node-1").exists()
    with ServerThread(*ARGS, "--data-dir", str(data), "--nodes", "2") as again:
        assert again.admin.queued("solo") == 0
        assert again.admin.queued("out", node=0) == 1


def test_a_restart_with_many_flowfiles_queued_opens_no_descriptor_per_flowfile(tmp_path: Path) -> None:
    """Each durable FlowFile that is not in wire form has a content file of its own; a restarted
    server opens it at its first read, not at load, so a long queue does not use up the process's
    descriptors (the pipeline soak saw 490 after a restart with a few thousand queued)."""
    data = str(tmp_path / "data")
    n = 3000
    srv = ServerProcess(*ARGS, "--data-dir", data).start()
    try:
        for start in range(0, n, 500):
            srv.admin.enqueue("out", [({"i": str(i)}, f"content {i}".encode()) for i in range(start, start + 500)])
    finally:
        srv.kill()
    assert len(list((tmp_path / "data" / "node-0" / "content").iterdir())) == n  # one file each
    with ServerProcess(*ARGS, "--data-dir", data) as again:
        assert again.admin.queued("out") == n
        fds = len(list(Path(f"/proc/{again.pid}/fd").iterdir()))
        assert fds < 100, fds
        got = S2S(again.api()).receive(again.port_id("out"))
        assert [p.content for p in got] == [f"content {i}".encode() for i in range(n)]
        assert len(list(Path(f"/proc/{again.pid}/fd").iterdir())) < 100
