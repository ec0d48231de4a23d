"""The reference wire: any bytes are rejected cleanly or decode; encode/decode round-trips."""

from __future__ import annotations

import socket

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import FrameDecodeError, FrameTooLarge, WireError
from harness.reference import wire

requests = st.builds(
    wire.Request,
    cmd=st.sampled_from(wire.COMMANDS),
    group_id=st.integers(0, 2**63 - 1),
    offsets=st.lists(st.integers(0, 2**63 - 1), max_size=20),
    transaction_id=st.text(max_size=40),
    commit=st.booleans(),
    id=st.none() | st.text(max_size=40),
)


@given(st.binary(max_size=512))
@settings(max_examples=500)
def test_any_bytes_decode_or_raise_wire_error(data: bytes) -> None:
    try:
        req = wire.decode_request(data)
    except WireError as exc:
        assert exc.error_type == "bad_request"
    else:
        assert req.cmd in wire.COMMANDS


@given(requests)
def test_request_round_trip(req: wire.Request) -> None:
    encoded = wire.encode_request(req)
    assert wire.parse_length(encoded[:4]) == len(encoded) - 4
    assert wire.decode_request(encoded[4:]) == req


@given(requests, st.lists(st.integers(1, 7), min_size=1, max_size=50))
def test_frame_reader_any_chunking(req: wire.Request, cuts: list[int]) -> None:
    stream = wire.encode_request(req) * 3
    reader = wire.FrameReader()
    bodies: list[bytes] = []
    pos, i = 0, 0
    while pos < len(stream):
        step = cuts[i % len(cuts)]
        bodies += reader.feed(stream[pos : pos + step])
        pos, i = pos + step, i + 1
    assert [wire.decode_request(b) for b in bodies] == [req] * 3
    assert not reader.in_frame


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (msgspec.msgpack.encode([1, 2]), "Expected `object`, got `array`"),
        (msgspec.msgpack.encode({"cmd": "format_disk"}), "Invalid enum value 'format_disk' - at `$.cmd`"),
        (msgspec.msgpack.encode({"cmd": "map_to_kv_tensors", "offsets": "0"}), "Expected `array`, got `str`"),
        (msgspec.msgpack.encode({"cmd": "map_to_kv_tensors", "offsets": [-1]}), "Expected `int` >= 0"),
        (msgspec.msgpack.encode({"cmd": "map_to_kv_tensors", "offset": [0]}), "unknown field `offset`"),
        (msgspec.msgpack.encode({"group_id": 0}), "missing required field `cmd`"),
        (b"\xc1", "malformed"),
        (msgspec.msgpack.encode({"cmd": "map_to_kv_tensors"})[:-3], "truncated"),
    ],
)
def test_malformed_bodies_name_the_problem(body: bytes, fragment: str) -> None:
    with pytest.raises(FrameDecodeError) as info:
        wire.decode_request(body)
    assert fragment in str(info.value)


def test_length_bounds() -> None:
    with pytest.raises(FrameTooLarge, match="frame length 0"):
        wire.parse_length(b"\0\0\0\0")
    with pytest.raises(FrameTooLarge, match="exceeds max_frame 16"):
        wire.parse_length(wire.HEADER.pack(17), max_frame=16)
    assert wire.parse_length(wire.HEADER.pack(16), max_frame=16) == 16
    reader = wire.FrameReader(max_frame=8)
    with pytest.raises(FrameTooLarge):
        reader.feed(wire.HEADER.pack(9))


def test_blocking_helpers_and_peer_closed() -> None:
    a, b = socket.socketpair()
    with a, b:
        wire.send_frame(a, b"\x80")
        assert wire.recv_frame(b) == b"\x80"
        a.sendall(wire.HEADER.pack(5) + b"ab")
        a.close()
        with pytest.raises(wire.PeerClosed, match="2 of 5 bytes"):
            wire.recv_frame(b)


def test_reply_round_trip_omits_defaults() -> None:
    rep = wire.Reply(status="error", error_type="shutting_down", message="m", id="x")
    body = wire.encode_reply(rep)[4:]
    assert set(msgspec.msgpack.decode(body)) == {"status", "error_type", "message", "id"}
    assert wire.decode_reply(body) == rep
    with pytest.raises(FrameDecodeError):
        wire.decode_reply(b"\x01")
