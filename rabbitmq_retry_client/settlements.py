"""The consuming channel's deliveries not settled yet, so that the originals of confirmed copies can be acked
together: one `basic.ack` with `multiple` for a run of them instead of one frame each.

A `basic.ack(multiple=true)` of delivery tag T settles every delivery of the channel up to T that is not settled
yet, so it may cover only originals whose copies the broker confirmed: it is sent only when every delivery up to
T not yet settled is one of them. That is known only while this record holds every delivery the channel took:
the broker numbers a channel's deliveries 1, 2, 3…, so a tag that is not one more than the previous one (a
delivery taken some other way) turns the multiple ack off for the channel, and each original is acked alone, as
before. Deliveries pika received but the consumer has not taken yet all have higher tags than those taken.

A retry loop republishes every failed delivery and acks its original once the copy is confirmed; the confirms
come a batch at a time, and an ack each for those originals made a quorum queue's broker settle them one
command at a time (bench/README.md, "Against the broker's floor").
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any


class Settlements:
    """Deliveries of one consuming channel not settled yet, in delivery order, and the originals to ack once
    `flush()` hands them over (the caller sends them before the connection's next I/O pass). Both consumers use it:
    it only counts, the consumer sends."""

    def __init__(self, channel: Any) -> None:
        self.channel = channel
        """The channel the deliveries came on (either client's); only the caller sends on it."""
        self._unsettled: OrderedDict[int, None] = OrderedDict()
        self._to_ack: list[int] = []
        self._last = 0
        self._complete = True
        """Every delivery of the channel was recorded (tags 1, 2, 3… without a gap): a multiple ack is safe."""

    def delivered(self, tag: int) -> None:
        """Record a delivery taken from the channel, before anything settles it."""
        if tag != self._last + 1:
            self._complete = False
        self._last = tag
        self._unsettled[tag] = None

    def settled(self, tag: int) -> None:
        """A frame that settles `tag` (ack, nack, reject) was queued on the channel."""
        self._unsettled.pop(tag, None)

    def ack_later(self, tag: int) -> None:
        """Ack `tag` with the next `flush()`."""
        self._to_ack.append(tag)

    def flush(self) -> list[tuple[int, bool]]:
        """The acks asked for since the last flush, as (delivery tag, multiple) to send in this order: the run of
        them that starts at the oldest delivery not settled as one `basic.ack(multiple=true)`, the others one each,
        in delivery order. The caller sends them before any later settlement of the channel."""
        if not self._to_ack:
            return []
        to_ack, self._to_ack = set(self._to_ack), []
        acks: list[tuple[int, bool]] = []
        last, covered = 0, 0
        if self._complete:
            for tag in self._unsettled:
                if tag not in to_ack:
                    break
                last, covered = tag, covered + 1
        if covered > 1:
            acks.append((last, True))
            for _ in range(covered):
                self._unsettled.popitem(last=False)
            to_ack = {tag for tag in to_ack if tag > last}
        for tag in sorted(to_ack):
            acks.append((tag, False))
            self._unsettled.pop(tag, None)
        return acks
