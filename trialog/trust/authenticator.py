"""Who may write what, and the :class:`Authenticator` that tags and checks records by it.

**Who may write what** (:meth:`Authenticator.sender_keys`): ``trial.*`` only the
orchestrator; observations, views, ``environment.done``, ``actor.timeout``, ``actor.left``
and rewards or messages whose sender is ``env`` or ``env/...`` only the environment;
actions, ``actor.joined`` and rewards or messages whose sender is an actor of the trial
only that actor's key; start and terminate requests a controller, gateway or learner;
other rewards, messages and parameter changes any core role. (Key ids:
:mod:`trialog.trust.keys`; tags: :mod:`trialog.trust.tags`.)

**Verifying** (:meth:`Authenticator.check`): a verifier that holds one of the sender's
allowed keys needs a valid tag by it; a verifier that holds none of them (an actor
service, a seat) needs a valid tag by one of its own actor or seat keys on a record kind
the core addresses to actors. Anything else fails with a reason.
"""

from __future__ import annotations

import hmac
from collections import OrderedDict
from collections.abc import Sequence

from trialog.protocol.events import (
    ENVIRONMENT_SENDER,
    Action,
    ActorJoined,
    ActorLeft,
    ActorTimeout,
    EnvironmentDone,
    Message,
    Observation,
    ParametersChanged,
    ResolvedTrial,
    Reward,
    StartRequest,
    TerminateRequest,
    TrialEnded,
    TrialPending,
    TrialRecord,
    TrialRejected,
    TrialStarted,
    TrialTerminating,
    View,
)
from trialog.protocol.roles import CONTROLLER, ENVIRONMENT, GATEWAY, LEARNER, ORCHESTRATOR
from trialog.trust.keys import Keyring, TrustError, actor_key_id, seat_key_id
from trialog.trust.seats import Seat
from trialog.trust.tags import HEADER_HOLDER, HEADER_TAKEOVER, MAC_PREFIX, MacKey, mac_input

# Roles that may stand behind a sender name that is neither the environment nor an actor.
CORE_WRITERS = (CONTROLLER, GATEWAY, LEARNER, ORCHESTRATOR)
REQUESTERS = (CONTROLLER, GATEWAY, LEARNER)


def _kinds(*types: type) -> frozenset[str]:
    return frozenset(t.KIND for t in types)


LIFECYCLE_KINDS = _kinds(TrialPending, TrialStarted, TrialRejected, TrialTerminating, TrialEnded, TrialRecord)
ENVIRONMENT_KINDS = _kinds(Observation, EnvironmentDone, ActorTimeout, ActorLeft, View)
ACTOR_KINDS = _kinds(Action, ActorJoined)
ADDRESSED_KINDS = _kinds(Reward, Message, ParametersChanged)
REQUEST_KINDS = _kinds(StartRequest, TerminateRequest)
# What the core sends to actors: what an actor service or seat accepts under its own key.
TO_ACTORS = LIFECYCLE_KINDS | _kinds(Observation, ActorTimeout, ActorLeft, Reward, Message)
# Records only a role's key writes, whoever the trial's actors are (sender_keys).
ROLE_WRITTEN = LIFECYCLE_KINDS | ENVIRONMENT_KINDS | REQUEST_KINDS


class Authenticator:
    """Tags the records one process writes and checks the ones it reads (a Bus has one: ``bus.trust``).

    ``role`` is the key this process tags with when the record itself does not say who
    sends it (start and terminate requests, rewards and messages from people and tools):
    ``controller`` by default, ``gateway`` or ``learner`` for those services.
    It learns each trial's actors (who plays whom, which are seats) from the verified
    ``trial.pending``/``trial.started`` records it reads or writes (:meth:`learn`).
    """

    ROSTERS_KEPT = 50_000
    PLANS_KEPT = 1_000  # per trial: a trial has a few dozen (kind, sender) pairs; forged headers make more

    def __init__(self, keyring: Keyring, role: str = CONTROLLER):
        self.keyring = keyring
        self.role = role
        self.core = keyring.holds_sender_keys()
        # trial -> {actor: (key id, actor class)}
        self._rosters: OrderedDict[str, dict[str, tuple[str, str]]] = OrderedDict()
        self._seats: dict[tuple[str, str], Seat] = {}
        # record key (the trial ID's bytes) -> {(kind, sender, receiver): how to tag such a
        # record, (kind, sender): how to check one}: the policy below, resolved once per trial
        # and kind instead of once per record (it is on every record's path). Dropped when
        # what it depends on changes (roster, seats).
        self._plans: dict[bytes, dict[tuple, object]] = {}
        # (kind, sender) -> how to check a record written by a role (ROLE_WRITTEN), which is the
        # same in every trial: made once, not once per trial (a trial's start and end records).
        self._role_checks: dict[tuple[bytes, bytes], object] = {}
        self._mac_keys: dict[bytes, MacKey] = {}

    def _forget_plans(self, trial_id: str) -> None:
        self._plans.pop(trial_id.encode(), None)

    def _mac_key(self, secret: bytes) -> MacKey:
        """One :class:`MacKey` per secret: every trial's plans tag with the same role keys."""
        mac = self._mac_keys.get(secret)
        if mac is None:
            if len(self._mac_keys) >= self.ROSTERS_KEPT:  # seat keys are per trial
                self._mac_keys.clear()
            mac = self._mac_keys[secret] = MacKey(secret)
        return mac

    def _plans_of(self, key: bytes) -> dict[tuple, object]:
        """The plans of the trial of record key ``key`` (bounded: record keys are untrusted input)."""
        plans = self._plans.get(key)
        if plans is None:
            if len(self._plans) >= self.ROSTERS_KEPT:
                self._plans.clear()
            plans = self._plans[key] = {}
        return plans

    def _remember(self, plans: dict[tuple, object], what: tuple, plan: object) -> object:
        """Keep a plan just made (bounded: the kind and sender headers are untrusted input)."""
        if len(plans) >= self.PLANS_KEPT:
            plans.clear()
        plans[what] = plan
        return plan

    # --- what the process knows ----------------------------------------------------------------
    def learn(self, trial: ResolvedTrial) -> None:
        """Remember who plays whom in a trial (call with verified records only)."""
        if trial.trial_id in self._rosters:
            self._rosters.move_to_end(trial.trial_id)
            return
        self._rosters[trial.trial_id] = {
            a.name: (seat_key_id(a.name) if a.client else actor_key_id(a.implementation), a.actor_class)
            for a in trial.actors
        }
        self._forget_plans(trial.trial_id)
        while len(self._rosters) > self.ROSTERS_KEPT:
            self._forget_plans(self._rosters.popitem(last=False)[0])

    def hold(self, seat: Seat, seat_key: bytes | None = None) -> None:
        """This process plays a client seat: its records get the seat's key and the ``holder`` header."""
        if seat_key is not None:
            self.keyring.add_seat(seat.trial_id, seat.actor, seat_key)
        elif self.keyring.key(seat_key_id(seat.actor), seat.trial_id) is None:
            raise TrustError(f"no key for seat {seat.actor} of trial {seat.trial_id}: join with the seat's join token")
        self._seats[(seat.trial_id, seat.actor)] = seat
        self._forget_plans(seat.trial_id)

    def release(self, trial_id: str, actor: str, holder: str | None = None) -> None:
        """Stop playing a seat (only if ``holder``, when given, still holds it here)."""
        seat = self._seats.get((trial_id, actor))
        if seat is not None and (holder is None or seat.holder == holder):
            del self._seats[(trial_id, actor)]
            self._forget_plans(trial_id)

    def holder(self, trial_id: str, actor: str) -> str | None:
        """Who this process writes a seat's records for (None: it plays no such seat)."""
        seat = self._seats.get((trial_id, actor))
        return seat.holder if seat is not None else None

    def actor_key(self, trial_id: str, actor: str) -> str | None:
        """The key id an actor of a trial writes with, if the trial is known."""
        if (trial_id, actor) in self._seats:
            return seat_key_id(actor)
        entry = self._rosters.get(trial_id, {}).get(actor)
        return entry[0] if entry else None

    # --- policy ---------------------------------------------------------------------------------------
    def sender_keys(self, trial_id: str, kind: str, sender: str) -> tuple[str, ...] | str:
        """The key ids allowed to write a record, or a reason why nobody can tell."""
        if kind in LIFECYCLE_KINDS:
            return (ORCHESTRATOR,)
        if kind in ENVIRONMENT_KINDS:
            return (ENVIRONMENT,)
        if kind in REQUEST_KINDS:
            return REQUESTERS
        if kind in ADDRESSED_KINDS and (sender == ENVIRONMENT_SENDER or sender.startswith(ENVIRONMENT_SENDER + "/")):
            return (ENVIRONMENT,)
        own = self.actor_key(trial_id, sender)
        if own is not None:
            return (own,)
        if kind in ACTOR_KINDS:
            return f"{kind} from {sender!r}: not an actor of a known trial {trial_id!r}"
        if kind in ADDRESSED_KINDS:
            return CORE_WRITERS
        return f"unknown record kind {kind!r}"

    def audience_keys(self, trial_id: str, kind: str, receiver: str) -> list[str]:
        """The actor and seat key ids a record is addressed to (tagged too, so they can verify it)."""
        roster = self._rosters.get(trial_id)
        if not roster or kind not in TO_ACTORS:
            return []
        if kind in LIFECYCLE_KINDS:
            return sorted({key for key, _ in roster.values()})
        out = set()
        for address in receiver.split(","):
            if address == "*":
                return sorted({key for key, _ in roster.values()})
            if address.endswith(".*"):
                out.update(key for key, cls in roster.values() if cls == address[:-2])
            elif address in roster:
                out.add(roster[address][0])
        return sorted(out)

    # --- tagging ----------------------------------------------------------------------------------------
    def tag(self, trial_id: str, headers: list[tuple[str, bytes]], value: bytes) -> list[tuple[str, bytes]]:
        """The headers to add to a record about to be written: seat headers and the tags."""
        h = dict(headers)
        g = h.get
        kind, sender, receiver = g("kind", b""), g("sender", b""), g("receiver", b"")
        key = trial_id.encode()
        plans = self._plans.get(key) or self._plans_of(key)  # the lookup inline: every record passes here
        plan = plans.get((kind, sender, receiver))
        if plan is None:
            plan = self._remember(
                plans,
                (kind, sender, receiver),
                self._tag_plan(trial_id, kind.decode(), sender.decode(), receiver.decode()),
            )
        if isinstance(plan, str):
            raise TrustError(plan)
        seat_headers, macs_by_header = plan
        if seat_headers:
            h.update(seat_headers)
        message = mac_input(key, h, value)
        out = list(seat_headers)
        for name, mac in macs_by_header:
            out.append((name, mac.tag(message)))
        return out

    def _tag_plan(self, trial_id: str, kind: str, sender: str, receiver: str) -> tuple[list, list] | str:
        """(seat headers to add, [(tag header, MacKey)]) for records of this kind, sender and
        receiver in this trial, or why this process cannot write them."""
        seat_headers: list[tuple[str, bytes]] = []
        seat = self._seats.get((trial_id, sender))
        if seat is not None:
            seat_headers.append((HEADER_HOLDER, seat.holder.encode()))
            if seat.takeover and kind == ActorJoined.KIND:
                seat_headers.append((HEADER_TAKEOVER, b"1"))
        allowed = self.sender_keys(trial_id, kind, sender)
        if isinstance(allowed, str):
            return f"cannot tag a record of trial {trial_id!r}: {allowed}"
        key_ids = [k for k in allowed if k == self.role] or list(allowed)
        own = next((k for k in key_ids if self.keyring.key(k, trial_id) is not None), None)
        if own is None:
            return (
                f"cannot write {kind} as {sender or self.role!r} in trial {trial_id!r}: "
                f"this process holds none of the keys {', '.join(allowed)} ({self.keyring.source})"
            )
        out = []
        for key_id in [own, *(k for k in self.audience_keys(trial_id, kind, receiver) if k != own)]:
            secret = self.keyring.key(key_id, trial_id)
            if secret is not None:
                out.append((MAC_PREFIX + key_id, self._mac_key(secret)))
        return seat_headers, out

    # --- checking ---------------------------------------------------------------------------------------
    def check(
        self, key: bytes | None, headers: Sequence[tuple[str, bytes]] | dict[str, bytes], value: bytes | None
    ) -> str | None:
        """None if the record was written by a key allowed to write it, else the reason. The
        headers as a record has them, or as the dict of them a reader made already (the last
        of a name counts, as ``dict`` keeps it)."""
        h = headers if type(headers) is dict else dict(headers)
        kind, sender, key = h.get("kind") or b"", h.get("sender") or b"", key or b""
        plans = self._plans.get(key) or self._plans_of(key)  # the lookup inline: every record passes here
        plan = plans.get((kind, sender))
        if plan is None:
            plan = self._remember(plans, (kind, sender), self._check_plan(key.decode(errors="replace"), kind, sender))
        if type(plan) is str:
            return plan
        verifiers, untagged, mismatch = plan
        message = None
        for header, _, mac in verifiers:
            tag = h.get(header)
            if tag is None:
                continue
            if message is None:
                try:
                    message = mac_input(key, h, value or b"")
                except TypeError:  # a header without a value (None) counts as empty
                    message = mac_input(key, {k: v or b"" for k, v in h.items()}, value or b"")
            if hmac.compare_digest(mac.tag(message), tag):
                return None
        if message is None:
            return untagged
        return mismatch[0] + " or ".join(key_id for header, key_id, _ in verifiers if header in h) + mismatch[1]

    def _check_plan(
        self, trial_id: str, kind_bytes: bytes, sender_bytes: bytes
    ) -> tuple[list, str, tuple[str, str]] | str:
        """([(tag header, key id, MacKey)] this process verifies such records with, the reason if
        none of those tags is there, the reason if none matches), or why such a record is
        refused whatever its tags."""
        shared = self._role_checks.get((kind_bytes, sender_bytes))
        if shared is not None:
            return shared
        try:
            kind, sender = kind_bytes.decode(), sender_bytes.decode()
        except UnicodeDecodeError:
            return "kind or sender header is not UTF-8"
        allowed = self.sender_keys(trial_id, kind, sender)
        if isinstance(allowed, str):
            return allowed
        held = [k for k in allowed if self.keyring.key(k, trial_id) is not None]
        if held and kind in ROLE_WRITTEN:  # role keys only: nothing here depends on the trial
            return self._remember(
                self._role_checks, (kind_bytes, sender_bytes), self._verifying(kind, sender, allowed, held, trial_id)
            )
        if not held and kind in TO_ACTORS:
            # An actor service or a seat: records the core addressed to it carry its own key.
            held = [*self.keyring.own_actor_keys(), *(seat_key_id(a) for (t, a) in self._seats if t == trial_id)]
        if not held:
            return f"{kind} needs a tag by {' or '.join(allowed)}; this service holds none of those keys"
        return self._verifying(kind, sender, allowed, held, trial_id)

    def _verifying(
        self, kind: str, sender: str, allowed: Sequence[str], held: list[str], trial_id: str
    ) -> tuple[list, str, tuple[str, str]]:
        """The check plan of :meth:`_check_plan` that verifies with the keys ``held``."""
        verifiers = [
            (MAC_PREFIX + k, k, self._mac_key(secret))
            for k in held
            if (secret := self.keyring.key(k, trial_id)) is not None
        ]
        untagged = (
            f"{kind} from {sender!r} is not tagged by {' or '.join(allowed)} (forged, or written without the key)"
        )
        mismatch = (f"{kind} from {sender!r}: the tag of ", " does not match the record (forged or altered)")
        return verifiers, untagged, mismatch
