"""One socket write per I/O pass instead of one per AMQP frame.

pika buffers every frame it is asked to send as a chunk of its own and, when the socket is writable, sends the
chunks one `send()` each: a published message is three frames (method, header, body), so a consumer that
republishes a batch of failed deliveries and acks the rest made three system calls per copy, each a TCP segment
of its own (pika sets TCP_NODELAY), and the broker read as many. The consumer already queues its copies and acks
for the connection's next I/O pass (`confirms.py`, `settlements.py`); here that pass sends what was queued as one
chunk (up to `MAX_JOINED_BYTES`), so the kernel and the broker see one write where they saw hundreds
(bench/README.md, "Against the broker's floor").

Nothing else changes: the same bytes leave in the same order, and pika's own code still sends them, counts them
and handles a partial send. The first chunk is never joined with others: it may be the rest of a partial send,
or a TLS write the socket asked to retry, which must be retried as it was. This reaches into pika 1.x's
transport (`_tx_buffers`, `_produce`); with a pika whose transport differs, the connection is left as pika made it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

MAX_JOINED_BYTES = 128 * 1024
"""At most this many bytes are joined into one chunk (one frame larger than that is sent as it is): a bound on
the copy that joining makes, well above what a batch of retried copies and acks takes."""


def join_pending(buffers: deque[bytes], limit: int = MAX_JOINED_BYTES) -> None:
    """Join the chunks after the first into as few as fit in `limit` bytes each, in order (a chunk larger than
    `limit` stays as it is)."""
    if len(buffers) <= 2:
        return
    head = buffers.popleft()
    groups: list[bytes] = []
    parts: list[bytes] = []
    size = 0
    for part in buffers:
        if parts and size + len(part) > limit:
            groups.append(b"".join(parts) if len(parts) > 1 else parts[0])
            parts, size = [], 0
        parts.append(part)
        size += len(part)
    groups.append(b"".join(parts) if len(parts) > 1 else parts[0])
    buffers.clear()
    buffers.append(head)
    buffers.extend(groups)


def send_joined(connection: Any) -> bool:
    """Make the open `connection` (a pika BlockingConnection or SelectConnection) send the frames it buffered as
    few chunks, by `join_pending` before each of its transport's sends; False (and nothing changed) when its
    transport is not pika 1.x's."""
    impl = getattr(connection, "_impl", connection)
    transport = getattr(impl, "_transport", None)
    buffers = getattr(transport, "_tx_buffers", None)
    produce: Callable[[], None] | None = getattr(transport, "_produce", None)
    if not isinstance(buffers, deque) or not callable(produce):
        return False

    def produce_joined() -> None:
        join_pending(buffers)
        produce()

    transport._produce = produce_joined  # type: ignore[union-attr]
    return True
