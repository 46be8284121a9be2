"""The exception hierarchy in ``pyspark_s2s.errors``: pickling, messages, and the response map."""

from __future__ import annotations

import inspect
import pickle
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyspark_s2s import errors
from pyspark_s2s.errors import (
    ChecksumMismatch,
    ConfigError,
    HTTPStatusError,
    PortDestinationFullError,
    PortNotRunningError,
    ProtocolError,
    S2SError,
    TransactionNotFoundError,
    TransportError,
    UnauthorizedError,
    UnknownPortError,
    error_for_response,
)

ERROR_CLASSES = sorted(
    (
        obj
        for _, obj in inspect.getmembers(errors, inspect.isclass)
        if issubclass(obj, BaseException) and obj.__module__ == errors.__name__
    ),
    key=lambda cls: cls.__name__,
)

FULL_CONTEXT: dict[str, Any] = {
    "option": "batchCount",
    "peer": "http://node-2:8080/nifi-api",
    "port": "from-spark",
    "transaction": "3b0c7bde-5b8f-4c53-8a7e-2a1f4b7d9c01",
    "http_status": 503,
    "response_code": 202,
}


def test_every_public_error_is_listed_and_under_the_root() -> None:
    assert len(ERROR_CLASSES) >= 15
    for cls in ERROR_CLASSES:
        assert issubclass(cls, S2SError), cls
        assert cls.__name__ in errors.__all__, cls


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("retriable", [True, False])
def test_pickle_round_trip_keeps_type_and_context(cls: type[S2SError], retriable: bool) -> None:
    err = cls("it broke", retriable=retriable, **FULL_CONTEXT)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        copy = pickle.loads(pickle.dumps(err, protocol=protocol))
        assert type(copy) is cls
        assert copy.message == "it broke"
        for field, value in FULL_CONTEXT.items():
            assert getattr(copy, field) == value, field
        assert copy.retriable is retriable
        assert str(copy) == str(err)
        assert copy.args == err.args


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
def test_pickle_round_trip_keeps_class_defaults(cls: type[S2SError]) -> None:
    err = cls("plain")
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy) is cls
    assert copy.retriable is cls.default_retriable
    # no status/code is claimed unless one was seen; a server answers with the class defaults
    assert copy.http_status is None and copy.response_code is None
    assert copy.answer_status == (cls.default_http_status or 500)
    assert copy.answer_code == (cls.default_response_code or 250)
    assert copy.context() == err.context()


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
def test_error_can_be_raised_and_caught_as_root(cls: type[S2SError]) -> None:
    with pytest.raises(S2SError) as info:
        raise cls("boom", peer="127.0.0.1:8080")
    assert isinstance(info.value, cls)
    assert str(info.value).startswith("boom")


text = st.text(min_size=1, max_size=40)


@given(
    cls=st.sampled_from(ERROR_CLASSES),
    message=st.text(max_size=80),
    peer=st.none() | text,
    port=st.none() | text,
    transaction=st.none() | text,
    http_status=st.none() | st.integers(100, 599),
    response_code=st.none() | st.integers(0, 255),
    retriable=st.none() | st.booleans(),
)
def test_pickle_round_trip_any_context(
    cls: type[S2SError],
    message: str,
    peer: str | None,
    port: str | None,
    transaction: str | None,
    http_status: int | None,
    response_code: int | None,
    retriable: bool | None,
) -> None:
    err = cls(
        message,
        peer=peer,
        port=port,
        transaction=transaction,
        http_status=http_status,
        response_code=response_code,
        retriable=retriable,
    )
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy) is cls
    assert (copy.message, copy.context(), copy.retriable) == (
        err.message,
        err.context(),
        err.retriable,
    )


def test_str_names_every_known_context_field() -> None:
    err = HTTPStatusError(
        "commit failed",
        peer="http://node-1:8080/nifi-api",
        port="to-spark",
        transaction="tx-42",
        http_status=500,
    )
    rendered = str(err)
    assert rendered.startswith("commit failed")
    for fragment in ("http://node-1:8080/nifi-api", "to-spark", "tx-42", "500"):
        assert fragment in rendered
    assert "tx-42" in repr(err) and "HTTPStatusError" in repr(err)


def test_str_leaves_out_unknown_fields() -> None:
    err = S2SError("just a message")
    assert str(err) == "just a message"
    err = S2SError("with a peer", peer="127.0.0.1:9443")
    assert str(err) == "with a peer [peer=127.0.0.1:9443]"
    assert "port" not in str(err) and "transaction" not in str(err)


def test_with_context_fills_only_unknown_fields() -> None:
    err = UnknownPortError("no such port", port="a")
    assert err.with_context(port="b", peer="p1", transaction="t1") is err
    assert (err.port, err.peer, err.transaction) == ("a", "p1", "t1")
    with pytest.raises(TypeError):
        err.with_context(password="secret")


def test_config_error_is_value_error_with_option() -> None:
    err = ConfigError("batchCount must be positive", option="batchCount")
    assert isinstance(err, ValueError)
    assert err.option == "batchCount"
    assert "batchCount" in str(err)
    copy = pickle.loads(pickle.dumps(err))
    assert isinstance(copy, ValueError) and isinstance(copy, ConfigError) and copy.option == "batchCount"
    with pytest.raises(ValueError):
        raise err


def test_stdlib_bases_callers_already_catch() -> None:
    assert issubclass(ProtocolError, ValueError)
    assert issubclass(ChecksumMismatch, ProtocolError)
    assert issubclass(TransportError, OSError)
    assert issubclass(errors.S2STimeoutError, TransportError)
    assert issubclass(errors.TransactionStateError, RuntimeError)


@pytest.mark.parametrize(
    ("http_status", "response_code", "cls", "retriable"),
    [
        (404, 200, UnknownPortError, False),
        (503, 201, PortNotRunningError, False),
        (503, 202, PortDestinationFullError, True),
        (401, 240, UnauthorizedError, False),
        (403, 240, UnauthorizedError, False),
        (403, None, UnauthorizedError, False),
        (401, None, UnauthorizedError, False),
        (404, None, TransactionNotFoundError, False),
        (500, None, HTTPStatusError, True),
        (503, None, HTTPStatusError, True),
        (400, None, HTTPStatusError, False),
        (400, 19, ChecksumMismatch, False),
    ],
)
def test_error_for_response(
    http_status: int, response_code: int | None, cls: type[S2SError], retriable: bool
) -> None:
    err = error_for_response(
        http_status, response_code, "server said no", peer="http://n1:8080/nifi-api", port="p"
    )
    assert type(err) is cls
    assert err.retriable is retriable
    assert err.http_status == http_status
    assert err.peer == "http://n1:8080/nifi-api" and err.port == "p"
    if response_code is not None:
        assert err.response_code == response_code
    assert str(http_status) in str(err)
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy) is cls and copy.retriable is retriable


def test_with_prefix_keeps_type_and_context_and_pickles() -> None:
    import pickle

    from pyspark_s2s.errors import PortNotRunningError

    err = PortNotRunningError("port is stopped", peer="http://h:1/nifi-api", port="out", http_status=503,
                              response_code=201)
    wrapped = err.with_prefix("nifi-s2s partition 3 of batch-7")
    assert type(wrapped) is PortNotRunningError and wrapped is not err
    assert wrapped.message == "nifi-s2s partition 3 of batch-7: port is stopped"
    assert err.message == "port is stopped"
    back = pickle.loads(pickle.dumps(wrapped))
    assert str(back) == str(wrapped)
    assert "http_status=503" in str(back) and "port=out" in str(back)
