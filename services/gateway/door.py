"""The gateway's door: every limit on what people's sockets and requests may cost.

A gateway is open to anyone who reaches its address, so every connection, message
and catch-up read is bounded — per address, per seat and per trial — and a flood
is refused here, cheaply, before it costs a Kafka read or a record in the log. What
is refused gets a defined answer (an HTTP status at the handshake, an ``error``
message, or a close with a code and reason); nothing waits without bound.

The counts are this process's own (a gateway keeps no state the log cannot
rebuild, I-7): behind a load balancer each instance enforces its share.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, fields

from trialog.runtime.rates import Bucket

# WebSocket close codes (the application range 4000-4999, shaped like HTTP's).
REFUSED = 4403  # a seat this socket may not have (bad link, held by another page)
SLOW = 4408  # the page did not read what it was sent in time: dropped, never buffered without bound
LIMITED = 4429  # over a limit (sockets per address / seat / trial, messages per second)
INTERNAL = 1011  # the gateway failed on this socket (logged with its traceback)

RATES_KEPT = 100_000  # message-rate buckets remembered (per address and per seat)


@dataclass(frozen=True)
class Limits:
    """What one gateway process lets people use; each is a flag of ``trialog serve gateway``."""

    connections_per_address: int = 64  # open sockets from one client address (NAT: a classroom shares one)
    connections_per_s_address: float = 32.0  # new connections from one address per second (bursts of twice that)
    sockets_per_seat: int = 4  # open sockets to one seat (a person's tabs), all holders together
    watchers_per_trial: int = 32  # watch sockets following one trial (more: another gateway instance)
    messages_per_s_seat: float = 20.0  # what one seat's sockets may send together (a tick every 50 ms)
    messages_per_s_address: float = 200.0  # what one address's sockets may send together
    frame_bytes: int = 64 * 1024  # the largest WebSocket message a page may send
    json_depth: int = 16  # nesting of a message's JSON (a message payload included)
    body_bytes: int = 64 * 1024  # the largest request body of the JSON API
    send_queue: int = 2048  # log records waiting for one socket; a socket that falls further behind is closed
    send_timeout_s: float = 10.0  # one message to a page that does not read for this long: the socket is closed
    catchups: int = 4  # catch-up rounds (a partition read once for the sockets waiting on it) at once per process
    catchup_wait_s: float = 30.0  # how long a socket waits for its catch-up round before it is refused
    takeover_after_s: float = 10.0  # a seat may be taken over once its holder has been silent this long

    def __post_init__(self) -> None:
        for f in fields(self):
            if not getattr(self, f.name) > 0:
                raise ValueError(
                    f"gateway limit {f.name.replace('_', '-')} must be above 0, not {getattr(self, f.name)!r}"
                )

    @classmethod
    def add_flags(cls, parser) -> None:
        """One ``--<name>`` flag per limit (``--connections-per-address 64``...)."""
        group = parser.add_argument_group("limits (per gateway process; docs/humans.md#limits)")
        for f in fields(cls):
            group.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default, metavar="N",
                               help=f"default {f.default}")  # fmt: skip

    @classmethod
    def from_args(cls, args) -> Limits:
        return cls(**{f.name: getattr(args, f.name) for f in fields(cls)})


class Refused(Exception):
    """A socket refused with ``code`` (a WebSocket close code: ``REFUSED`` for a seat it may
    not have, ``LIMITED`` over a limit...) and ``reason`` for people."""

    def __init__(self, reason: str, code: int = REFUSED, *, held: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.code = code
        self.held = held  # a seat held by another page: the page may offer a takeover later


class Door:
    """The counts behind :class:`Limits`, for one gateway process."""

    def __init__(self, limits: Limits | None = None):
        self.limits = limits or Limits()
        self._by_address: dict[str, int] = defaultdict(int)
        self._watchers: dict[str, int] = defaultdict(int)
        self._seat_sockets: dict[tuple[str, str], dict[str, int]] = {}  # (trial, actor) -> holder -> open sockets
        self._rates: dict[object, Bucket] = {}

    # --- connections -------------------------------------------------------------------------
    def connect(self, address: str) -> str | None:
        """May ``address`` open one more connection now (HTTP or WebSocket)? None, or why not."""
        if self._bucket(("connect", address), self.limits.connections_per_s_address).take(time.monotonic()):
            return None
        return (
            f"too many new connections from your address (at most {self.limits.connections_per_s_address:g} per second)"
        )

    def enter(self, address: str) -> None:
        """One more socket from ``address``; :class:`Refused` past the limit."""
        if self._by_address[address] >= self.limits.connections_per_address:
            raise Refused(
                f"too many connections from your address (at most {self.limits.connections_per_address} at once)",
                LIMITED,
            )
        self._by_address[address] += 1

    def leave(self, address: str) -> None:
        self._drop(self._by_address, address)

    def watch(self, trial_id: str) -> None:
        if self._watchers[trial_id] >= self.limits.watchers_per_trial:
            raise Refused(
                f"trial {trial_id} has as many watchers as this gateway allows "
                f"({self.limits.watchers_per_trial}); try again later",
                LIMITED,
            )
        self._watchers[trial_id] += 1

    def unwatch(self, trial_id: str) -> None:
        self._drop(self._watchers, trial_id)

    # --- seats -------------------------------------------------------------------------------
    def sit(self, trial_id: str, actor: str, holder: str, takeover: bool) -> None:
        """One more socket of ``holder`` to a seat. Refused past the per-seat limit, and a
        takeover is refused while another holder has a socket open here: a seat is never
        taken from a page that is still there."""
        holders = self._seat_sockets.setdefault((trial_id, actor), {})
        if sum(holders.values()) >= self.limits.sockets_per_seat:
            raise Refused(
                f"seat {actor} has as many open pages as this gateway allows "
                f"({self.limits.sockets_per_seat}); close one",
                LIMITED,
            )
        if takeover and any(h != holder for h in holders):
            raise Refused(
                f"seat {actor} is played by another page that is still connected; "
                "it can be taken over once that page is closed",
                REFUSED,
                held=True,
            )
        holders[holder] = holders.get(holder, 0) + 1

    def stand(self, trial_id: str, actor: str, holder: str) -> bool:
        """One socket of ``holder`` closed; True when it was the holder's last here (only
        then does the gateway stop writing for that holder: a second tab closing never
        drops the seat of the first)."""
        holders = self._seat_sockets.get((trial_id, actor))
        if holders is None or holder not in holders:
            return True
        holders[holder] -= 1
        if holders[holder] > 0:
            return False
        del holders[holder]
        if not holders:
            del self._seat_sockets[(trial_id, actor)]
        return True

    # --- messages ----------------------------------------------------------------------------
    def speak(self, address: str, seat: tuple[str, str] | None) -> str | None:
        """May one more message from ``address`` (and ``seat``) go through now? None, or why not."""
        now = time.monotonic()
        if seat is not None and not self._bucket(seat, self.limits.messages_per_s_seat).take(now):
            return f"too many messages: a seat may send {self.limits.messages_per_s_seat:g} per second"
        if not self._bucket(address, self.limits.messages_per_s_address).take(now):
            return f"too many messages: one address may send {self.limits.messages_per_s_address:g} per second"
        return None

    def _bucket(self, key: object, rate: float) -> Bucket:
        bucket = self._rates.get(key)
        if bucket is None:
            # Kept after their sockets close, so that reconnecting does not refill a bucket;
            # bounded, since addresses and seats come from outside.
            if len(self._rates) >= RATES_KEPT:
                self._rates.clear()
            bucket = self._rates[key] = Bucket(rate)
        return bucket

    @staticmethod
    def _drop(counts: dict[str, int], key: str) -> None:
        if counts.get(key, 0) <= 1:
            counts.pop(key, None)
        else:
            counts[key] -= 1
