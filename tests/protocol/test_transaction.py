"""Transaction state machines: every (state, event) pair of every table, NiFi's client scenarios
(docs/protocol.md §12 items 20-26), the server transaction life cycle (§6, item 49), the TTL rule, and
the docs page being generated from the tables."""

from __future__ import annotations

import itertools
import pickle
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyspark_s2s.errors import TransactionStateError
from pyspark_s2s.protocol.transaction import (
    CLIENT_RECEIVE,
    CLIENT_SEND,
    SERVER,
    ClientEvent,
    ClientState,
    ServerEvent,
    ServerState,
    TransactionStateMachine,
    diagrams_markdown,
    expires_at,
    is_expired,
    terminal_states,
    to_mermaid,
)

C = ClientState
CE = ClientEvent
V = ServerState
VE = ServerEvent

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol-core.md"


# -- independent restatement of the rules (the tables must agree with it) --------------------

CLIENT_TERMINAL = {C.COMPLETED, C.CANCELED, C.ERROR}


def expected_send(state: ClientState, event: ClientEvent) -> ClientState | None:
    if state in CLIENT_TERMINAL:
        return None  # everything after completion/cancel/failure is illegal
    if state is C.DATA_RECEIVED:
        return None  # a receive-only state, unreachable when sending
    if event is CE.CANCEL:
        return C.CANCELED
    if event is CE.FAIL:
        return C.ERROR
    if event is CE.SEND_PACKET and state in (C.STARTED, C.DATA_EXCHANGED):
        return C.DATA_EXCHANGED
    if event is CE.CONFIRM and state is C.DATA_EXCHANGED:
        return C.CONFIRMED  # never from STARTED: "send zero then confirm" is illegal (item 23)
    if event is CE.COMPLETE and state is C.CONFIRMED:
        return C.COMPLETED
    return None


def expected_receive(state: ClientState, event: ClientEvent) -> ClientState | None:
    if state in CLIENT_TERMINAL:
        return None
    if event is CE.CANCEL:
        return C.CANCELED
    if event is CE.FAIL:
        return C.ERROR
    if event is CE.RECEIVE_PACKET and state in (C.STARTED, C.DATA_EXCHANGED):
        return C.DATA_EXCHANGED
    if event is CE.RECEIVE_END and state in (C.STARTED, C.DATA_EXCHANGED, C.DATA_RECEIVED):
        return C.DATA_RECEIVED
    if event is CE.CONFIRM and state is C.DATA_RECEIVED:
        return C.CONFIRMED  # only once the server's stream has ended
    if event is CE.COMPLETE and state is C.CONFIRMED:
        return C.COMPLETED
    return None


SERVER_TERMINAL = {V.COMMITTED, V.CANCELED, V.CHECKSUM_FAILED, V.EXPIRED, V.FAILED}


def expected_server(state: ServerState, event: ServerEvent) -> ServerState | None:
    if state in SERVER_TERMINAL:
        return None
    if event is VE.CANCEL:
        return V.CANCELED  # DELETE 15 any time before a terminal state
    if event is VE.EXPIRE:
        return V.EXPIRED
    if event is VE.FAIL:
        return V.FAILED
    if event is VE.EXTEND:
        return state  # PUT keeps the state (also during a transfer: NiFi's keep-alive)
    if event is VE.BEGIN_TRANSFER and state is V.CREATED:
        return V.TRANSFERRING
    if event is VE.END_TRANSFER and state is V.TRANSFERRING:
        return V.HELD
    if event is VE.NO_DATA and state is V.TRANSFERRING:
        return V.CREATED  # 200 on an empty output port: never held, just expires
    if event is VE.COMMIT and state is V.HELD:
        return V.COMMITTED
    if event is VE.BAD_CHECKSUM and state is V.HELD:
        return V.CHECKSUM_FAILED
    return None


CASES = [
    ("send", CLIENT_SEND, ClientState, ClientEvent, expected_send),
    ("receive", CLIENT_RECEIVE, ClientState, ClientEvent, expected_receive),
    ("server", SERVER, ServerState, ServerEvent, expected_server),
]


@pytest.mark.parametrize("name,table,states,events,expected", CASES, ids=[c[0] for c in CASES])
def test_every_state_event_pair(name, table, states, events, expected) -> None:
    legal = 0
    for state, event in itertools.product(states, events):
        machine = TransactionStateMachine(table, state, transaction="tx-1")
        want = expected(state, event)
        assert machine.can(event) is (want is not None), (state, event)
        if want is None:
            with pytest.raises(TransactionStateError) as info:
                machine.handle(event)
            assert machine.state is state, "an illegal event must leave the state untouched"
            message = str(info.value)
            assert state.name in message and event.name in message
            assert info.value.transaction == "tx-1"
        else:
            legal += 1
            assert machine.handle(event) is want
            assert machine.state is want
    assert legal == len(table)  # the table holds nothing beyond the rules


@pytest.mark.parametrize("name,table,states,events,expected", CASES, ids=[c[0] for c in CASES])
@given(data=st.data())
def test_random_event_sequences(name, table, states, events, expected, data) -> None:
    """Any sequence of events: legal ones move as the rules say, illegal ones raise and change
    nothing, and a terminal state accepts nothing."""
    initial = next(iter(states))
    machine = TransactionStateMachine(table, initial)
    sequence = data.draw(st.lists(st.sampled_from(list(events)), max_size=12))
    state = initial
    for event in sequence:
        want = expected(state, event)
        if want is None:
            with pytest.raises(TransactionStateError):
                machine.handle(event)
        else:
            machine.handle(event)
            state = want
        assert machine.state is state
        assert machine.is_terminal == (not machine.allowed())


def test_terminal_states() -> None:
    assert terminal_states(CLIENT_SEND) == {C.COMPLETED, C.CANCELED, C.ERROR}
    assert terminal_states(CLIENT_RECEIVE) == {C.COMPLETED, C.CANCELED, C.ERROR}
    assert terminal_states(SERVER) == SERVER_TERMINAL
    machine = TransactionStateMachine(CLIENT_SEND, C.STARTED)
    assert not machine.is_terminal
    machine.handle(CE.CANCEL)
    assert machine.is_terminal
    assert machine.allowed() == []


def run(table, events, initial=C.STARTED):
    machine = TransactionStateMachine(table, initial)
    for event in events:
        machine.handle(event)
    return machine


# -- NiFi client scenarios (TestHttpClientTransaction, docs/protocol.md §12 items 20-26) -----------


def test_receive_zero_packets_confirms_and_completes() -> None:  # item 20
    machine = run(CLIENT_RECEIVE, [CE.RECEIVE_END, CE.RECEIVE_END, CE.CONFIRM, CE.COMPLETE])
    assert machine.state is C.COMPLETED


@pytest.mark.parametrize("packets", [1, 2])
def test_receive_packets_then_confirm_and_complete(packets: int) -> None:  # item 21
    events = [CE.RECEIVE_PACKET] * packets + [CE.RECEIVE_END, CE.CONFIRM, CE.COMPLETE]
    assert run(CLIENT_RECEIVE, events).state is C.COMPLETED


def test_receive_confirm_before_end_of_stream_is_illegal() -> None:
    machine = run(CLIENT_RECEIVE, [CE.RECEIVE_PACKET])
    with pytest.raises(TransactionStateError, match="CONFIRM.*DATA_EXCHANGED"):
        machine.handle(CE.CONFIRM)
    assert machine.state is C.DATA_EXCHANGED


def test_receive_packet_after_end_of_stream_is_illegal() -> None:
    machine = run(CLIENT_RECEIVE, [CE.RECEIVE_PACKET, CE.RECEIVE_END])
    with pytest.raises(TransactionStateError):
        machine.handle(CE.RECEIVE_PACKET)


def test_receive_bad_checksum_answer_is_error_then_everything_raises() -> None:  # item 22
    machine = run(CLIENT_RECEIVE, [CE.RECEIVE_PACKET, CE.RECEIVE_END, CE.FAIL])
    assert machine.state is C.ERROR
    for event in ClientEvent:
        with pytest.raises(TransactionStateError, match="ERROR"):
            machine.handle(event)
        assert machine.state is C.ERROR


def test_send_zero_packets_confirm_and_complete_raise() -> None:  # item 23
    machine = TransactionStateMachine(CLIENT_SEND, C.STARTED)
    with pytest.raises(TransactionStateError, match="CONFIRM.*STARTED"):
        machine.handle(CE.CONFIRM)
    with pytest.raises(TransactionStateError, match="COMPLETE.*STARTED"):
        machine.handle(CE.COMPLETE)
    assert machine.state is C.STARTED


@pytest.mark.parametrize("packets", [1, 2])
def test_send_packets_confirm_complete(packets: int) -> None:  # items 24, 26
    events = [CE.SEND_PACKET] * packets + [CE.CONFIRM, CE.COMPLETE]
    assert run(CLIENT_SEND, events).state is C.COMPLETED


def test_send_checksum_mismatch_fails_then_confirm_and_complete_raise() -> None:  # item 25, 13, 14
    machine = run(CLIENT_SEND, [CE.SEND_PACKET, CE.SEND_PACKET, CE.FAIL])
    for event in (CE.CONFIRM, CE.COMPLETE, CE.CANCEL, CE.SEND_PACKET):
        with pytest.raises(TransactionStateError):
            machine.handle(event)
    assert machine.state is C.ERROR


def test_complete_without_confirm_is_illegal() -> None:
    machine = run(CLIENT_SEND, [CE.SEND_PACKET])
    with pytest.raises(TransactionStateError, match="COMPLETE"):
        machine.handle(CE.COMPLETE)


@pytest.mark.parametrize(
    "table,prefix",
    [
        (CLIENT_SEND, []),
        (CLIENT_SEND, [CE.SEND_PACKET]),
        (CLIENT_SEND, [CE.SEND_PACKET, CE.CONFIRM]),
        (CLIENT_RECEIVE, [CE.RECEIVE_PACKET, CE.RECEIVE_END]),
    ],
)
def test_cancel_before_completion(table, prefix) -> None:
    machine = run(table, [*prefix, CE.CANCEL])
    assert machine.state is C.CANCELED
    with pytest.raises(TransactionStateError):
        machine.handle(CE.COMPLETE)


def test_cancel_after_completion_is_illegal() -> None:
    machine = run(CLIENT_SEND, [CE.SEND_PACKET, CE.CONFIRM, CE.COMPLETE])
    with pytest.raises(TransactionStateError, match="CANCEL.*COMPLETED"):
        machine.handle(CE.CANCEL)


def test_send_table_knows_no_receive_events() -> None:
    machine = TransactionStateMachine(CLIENT_SEND, C.STARTED)
    for event in (CE.RECEIVE_PACKET, CE.RECEIVE_END):
        assert not machine.can(event)


# -- server life cycles ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "events,final",
    [
        ([VE.EXTEND, VE.BEGIN_TRANSFER, VE.EXTEND, VE.END_TRANSFER, VE.EXTEND, VE.COMMIT], V.COMMITTED),
        ([VE.BEGIN_TRANSFER, VE.END_TRANSFER, VE.BAD_CHECKSUM], V.CHECKSUM_FAILED),
        ([VE.BEGIN_TRANSFER, VE.END_TRANSFER, VE.CANCEL], V.CANCELED),
        ([VE.BEGIN_TRANSFER, VE.END_TRANSFER, VE.EXPIRE], V.EXPIRED),
        ([VE.BEGIN_TRANSFER, VE.NO_DATA, VE.EXPIRE], V.EXPIRED),  # empty output port (§1.6, §7)
        ([VE.CANCEL], V.CANCELED),
        ([VE.BEGIN_TRANSFER, VE.FAIL], V.FAILED),
    ],
)
def test_server_life_cycles(events, final) -> None:
    assert run(SERVER, events, V.CREATED).state is final


def test_server_holding_twice_is_illegal() -> None:  # item 49
    machine = run(SERVER, [VE.BEGIN_TRANSFER, VE.END_TRANSFER], V.CREATED)
    for event in (VE.BEGIN_TRANSFER, VE.END_TRANSFER):
        with pytest.raises(TransactionStateError):
            machine.handle(event)
    assert machine.state is V.HELD


def test_server_commit_needs_held() -> None:
    for prefix in ([], [VE.BEGIN_TRANSFER], [VE.BEGIN_TRANSFER, VE.NO_DATA]):
        machine = run(SERVER, prefix, V.CREATED)
        with pytest.raises(TransactionStateError, match="COMMIT"):
            machine.handle(VE.COMMIT)


def test_error_pickles_with_context() -> None:
    machine = TransactionStateMachine(SERVER, V.COMMITTED, transaction="abc")
    with pytest.raises(TransactionStateError) as info:
        machine.handle(VE.EXTEND)
    clone = pickle.loads(pickle.dumps(info.value))
    assert str(clone) == str(info.value)
    assert "terminal" in str(clone)


# -- TTL ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "elapsed,ttl,expired",
    [
        (0.0, 30, False),
        (30.0, 30, False),
        (30.999, 30, False),  # whole seconds: 30 is not > 30
        (31.0, 30, True),
        (3.5, 3, False),
        (4.0, 3, True),
        (1.0, 0, True),
        (0.999, 0, False),
        (-5.0, 30, False),  # a clock going backwards never expires a transaction
    ],
)
def test_is_expired(elapsed: float, ttl: int, expired: bool) -> None:
    start = 1_000_000.25
    assert is_expired(start, start + elapsed, ttl) is expired


def test_expires_at_is_first_expired_instant() -> None:
    start = 500.5
    for ttl in (0, 1, 3, 30):
        t = expires_at(start, ttl)
        assert is_expired(start, t, ttl)
        assert not is_expired(start, t - 0.001, ttl)


# -- docs --------------------------------------------------------------------------------------


def test_mermaid_lists_every_transition() -> None:
    text = to_mermaid(CLIENT_SEND, C.STARTED)
    assert text.startswith("stateDiagram-v2\n    [*] --> STARTED\n")
    edges = re.findall(r"^    (\w+) --> (\w+): (.+)$", text, re.MULTILINE)
    drawn = {(src, event, dst) for src, dst, events in edges for event in events.split(", ")}
    assert drawn == {(s.name, e.name, d.name) for (s, e), d in CLIENT_SEND.items()}
    for state in (C.COMPLETED, C.CANCELED, C.ERROR):
        assert f"    {state.name} --> [*]\n" in text


def test_docs_page_embeds_the_generated_diagrams() -> None:
    text = DOC.read_text(encoding="utf-8")
    begin, end = "<!-- BEGIN GENERATED: transaction diagrams -->\n", "<!-- END GENERATED -->"
    assert begin in text and end in text, "docs/protocol-core.md lost its generated-section markers"
    embedded = text.split(begin, 1)[1].split(end, 1)[0]
    assert embedded == diagrams_markdown(), (
        "docs/protocol-core.md is out of date; regenerate the section with "
        "pyspark_s2s.protocol.transaction.diagrams_markdown()"
    )
