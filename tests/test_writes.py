"""A connection sends what one I/O pass queued as few chunks (rabbitmq_retry_client/writes.py): the same bytes in
the same order, the first chunk never touched (a partial send's rest, or a TLS write to retry as it was)."""

from __future__ import annotations

import itertools
from collections import deque
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from rabbitmq_retry_client.writes import MAX_JOINED_BYTES, join_pending, send_joined


@given(st.lists(st.binary(min_size=1, max_size=300), max_size=40), st.integers(min_value=1, max_value=2000))
def test_joining_keeps_every_byte_in_order_and_leaves_the_first_chunk_alone(chunks: list[bytes], limit: int) -> None:
    buffers = deque(chunks)
    join_pending(buffers, limit)
    assert b"".join(buffers) == b"".join(chunks)
    if chunks:
        assert buffers[0] is chunks[0]
    if len(chunks) > 2:
        joined = list(buffers)[1:]
        assert all(len(chunk) <= limit or chunk in chunks for chunk in joined), "a larger one is alone"
        assert all(len(a) + len(b) > limit for a, b in itertools.pairwise(joined)), "as few as fit"
    else:
        assert list(buffers) == chunks


def test_the_frames_queued_behind_the_first_leave_as_one_chunk() -> None:
    frames = deque([b"rest of a partial send", *(b"frame %d" % n for n in range(300))])
    join_pending(frames)
    assert len(frames) == 2 and frames[0] == b"rest of a partial send"


def test_a_frame_larger_than_the_limit_is_sent_alone_between_the_joined_ones() -> None:
    big = b"b" * (MAX_JOINED_BYTES + 1)
    buffers = deque([b"head", b"v", b"w", big, b"x", b"y"])
    join_pending(buffers)
    assert list(buffers) == [b"head", b"vw", big, b"xy"]


def test_each_send_of_the_transport_joins_first() -> None:
    sent: list[list[bytes]] = []
    transport = SimpleNamespace(_tx_buffers=deque([b"a", b"b", b"c", b"d"]))
    transport._produce = lambda: sent.append(list(transport._tx_buffers))
    connection = SimpleNamespace(_impl=SimpleNamespace(_transport=transport))
    assert send_joined(connection)
    transport._produce()
    assert sent == [[b"a", b"bcd"]]


def test_a_transport_that_is_not_pika_1x_is_left_as_it_is() -> None:
    assert not send_joined(SimpleNamespace(_impl=SimpleNamespace(_transport=None)))
    assert not send_joined(SimpleNamespace(_impl=SimpleNamespace(_transport=SimpleNamespace(_tx_buffers=[]))))
