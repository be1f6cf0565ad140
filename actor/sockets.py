"""Socket options of the connections an actor host makes to the learner (the actor's, the weight
relay's): how fast they notice a dead link and connect again once it is back."""

from __future__ import annotations

import zmq

# A connection attempt unanswered this long is made afresh, so one gets through within about a
# second of the link's return, where the kernel's own SYN retries back off to 1, 3, 7, 15 s.
CONNECT_TIMEOUT_MS = 1000
# ZMTP heartbeats close a silent subscription (a link gone without a FIN) and make it afresh. Not
# on the DEALER: closing it underneath would lose the chunks in it, and their credits.
SUB_HEARTBEAT_IVL_MS, SUB_HEARTBEAT_TIMEOUT_MS = 1000, 3000


def watch_subscription(sub: zmq.Socket) -> None:
    """A SUB that notices a dead connection and connects again quickly (see above)."""
    sub.setsockopt(zmq.CONNECT_TIMEOUT, CONNECT_TIMEOUT_MS)
    sub.setsockopt(zmq.HEARTBEAT_IVL, SUB_HEARTBEAT_IVL_MS)
    sub.setsockopt(zmq.HEARTBEAT_TIMEOUT, SUB_HEARTBEAT_TIMEOUT_MS)
