"""Who wrote a record: keyrings, record tags (HMAC-SHA256), seats and join tokens.

Kafka does not tell a consumer who produced a record, so every record on ``control``
and ``events`` carries HMAC-SHA256 tags in its headers, and the service that owns a
record kind drops (and dead-letters) a record that lacks the tag of a key its sender
is allowed to hold. ``docs/security.md`` is the threat model; this docstring is the
API and the wire format, for the SDKs of other languages too.

**Keys.** A deployment's :class:`Keyring` holds one secret per *key id*:

=====================  =====================================================================
key id                 held by
=====================  =====================================================================
``orchestrator``       the orchestrator (lifecycle records: ``trial.*``)
``environment``        environment services (observations, ``env`` rewards, timeouts, ...)
``controller``         controllers: the CLI, the Python API, campaigns (start/terminate)
``gateway``            the web gateway (start requests, people's rewards and messages)
``learner``            learner services
``actors``             master of the actor keys: ``actors.<impl>`` = derive(actors, impl)
``actors.<impl>``      the actor service of one implementation (given, or derived)
``seats``              master of the seat keys and of join tokens
``seat.<actor>``       a client seat of one trial: derive(seats, trial, actor)
=====================  =====================================================================

Core services (orchestrator, environment, logger, gateway, learner, operator CLI)
hold the whole keyring; an actor service holds only ``actors.<impl>`` (export one
with ``trialog keyring export --implementation IMPL``); a client seat holds only its
seat key, which its join token carries.

``derive(master, *parts) = HMAC-SHA256(master, LP("trialog.key.v1") || LP(part)...)``
where ``LP(x)`` is the 4-byte big-endian length of the UTF-8 bytes of ``x``, then the
bytes. So ``actors.<impl>`` = ``derive(actors, "actors", impl)`` and
``seat.<actor>`` of trial T = ``derive(seats, "seat", T, actor)``.

**Tags.** A tag is a header ``mac.<key id>`` whose value is the 32-byte
``HMAC-SHA256(key, input)`` with

    input = LP("trialog.mac.v1") || LP(record key) || LP(kind) || LP(tick) || LP(sender)
            || LP(receiver) || LP(id) || LP(holder) || LP(takeover) || LP(value)

where ``kind``, ``tick``, ``sender``, ``receiver``, ``id``, ``holder``, ``takeover``
are the raw bytes of those headers (empty when absent; ``tick`` is its decimal
header text), the record key is the trial ID and ``value`` the record's value bytes.
A record is tagged with its **sender's key**, and also with the key of each actor it
is addressed to (observations, timeouts, rewards and messages to actors, and every
lifecycle record with each actor key of its trial), so that an actor service or seat
verifies what it reads with its own key.

**Who may write what** (:func:`sender_keys`): ``trial.*`` only the orchestrator;
observations, views, ``environment.done``, ``actor.timeout``, ``actor.left`` and rewards or
messages whose sender is ``env`` or ``env/...`` only the environment; actions,
``actor.joined`` and rewards or messages whose sender is an actor of the trial only
that actor's key; start and terminate requests a controller, gateway or learner;
other rewards, messages and parameter changes any core role.

**Verifying** (:meth:`Authenticator.check`): a verifier that holds one of the
sender's allowed keys needs a valid tag by it; a verifier that holds none of them
(an actor service, a seat) needs a valid tag by one of its own actor or seat keys
on a record kind the core addresses to actors. Anything else fails with a reason.

**Seats.** A client seat has one *holder* (an id the client picks and keeps, e.g. in
a browser's localStorage), sent in the ``holder`` header of every record of the seat.
The first ``actor.joined`` of a seat names its holder; a later join by another holder
is refused unless it has the header ``takeover: 1`` (then the new holder has the seat
and the first one, reading the log, is told); a join by the same holder resumes.
:class:`SeatBook` applies these rules to the log, so every service agrees.

**Join tokens.** ``tl1.<payload>.<mac>``: ``payload`` is base64url (no padding) of the
JSON object ``{"actor", "exp" (Unix seconds), "seat_key" (base64url), "trial"}`` and
``mac`` base64url of ``HMAC-SHA256(derive(seats, "join-token"), "tl1." + payload)``.
Minted by whoever holds ``seats`` (:func:`mint_join_token`, no round trip); verified
by the gateway (:func:`verify_join_token`, reasons ``malformed``, ``forged``,
``expired``, ``wrong_trial``, ``wrong_actor``); a client reads its seat key from it
(:func:`read_join_token`).

Python API, in short::

    keyring = Keyring.load(settings)                   # file, directory, env vars, or the dev keyring
    trust = Authenticator(keyring, role="controller")  # a Bus makes one: bus.trust
    headers += trust.tag(trial_id, headers, value)     # Bus.to_record does this
    reason = trust.check(record)                       # None, or why the record is refused
    token = mint_join_token(keyring, trial_id, "bob", ttl_s=3600)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import os
import secrets
import struct
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from trialog.errors import TrialogError

if TYPE_CHECKING:
    from trialog.protocol.events import ResolvedTrial
    from trialog.settings import Settings

# --- names ---------------------------------------------------------------------------------

ORCHESTRATOR = "orchestrator"
ENVIRONMENT = "environment"
CONTROLLER = "controller"
GATEWAY = "gateway"
LEARNER = "learner"
ACTORS = "actors"
SEATS = "seats"
ROLES = (ORCHESTRATOR, ENVIRONMENT, CONTROLLER, GATEWAY, LEARNER, ACTORS, SEATS)
# Roles that may stand behind a sender name that is neither the environment nor an actor.
CORE_WRITERS = (CONTROLLER, GATEWAY, LEARNER, ORCHESTRATOR)
REQUESTERS = (CONTROLLER, GATEWAY, LEARNER)

MAC_PREFIX = "mac."
HEADER_HOLDER = "holder"
HEADER_TAKEOVER = "takeover"
MAC_LABEL = b"trialog.mac.v1"
KEY_LABEL = b"trialog.key.v1"
TOKEN_PREFIX = "tl1."
KEY_BYTES = 32

# Header names the MAC input is made of, in order (between the record key and the value).
MAC_HEADERS = ("kind", "tick", "sender", "receiver", "id", HEADER_HOLDER, HEADER_TAKEOVER)

LIFECYCLE_KINDS = frozenset({"trial.pending", "trial.started", "trial.rejected", "trial.terminating", "trial.ended", "trial.record"})
ENVIRONMENT_KINDS = frozenset({"observation", "environment.done", "actor.timeout", "actor.left", "view"})
ACTOR_KINDS = frozenset({"action", "actor.joined"})
ADDRESSED_KINDS = frozenset({"reward", "message", "parameters.changed"})
REQUEST_KINDS = frozenset({"trial.start", "trial.terminate"})
# What the core sends to actors: what an actor service or seat accepts under its own key.
TO_ACTORS = LIFECYCLE_KINDS | frozenset({"observation", "actor.timeout", "actor.left", "reward", "message"})


class TrustError(TrialogError):
    """A key is missing, a keyring is malformed, or a token is refused (``reason`` says which)."""

    def __init__(self, message: str, *, reason: str = ""):
        super().__init__(message)
        self.reason = reason


def _lp(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def derive(master: bytes, *parts: str) -> bytes:
    """A sub-key: HMAC-SHA256(master, LP("trialog.key.v1") || LP(part)...)."""
    return hmac.digest(master, _lp(KEY_LABEL) + b"".join(_lp(p.encode()) for p in parts), "sha256")


def actor_key_id(implementation: str) -> str:
    return f"{ACTORS}.{implementation}"


def seat_key_id(actor: str) -> str:
    return f"seat.{actor}"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


# --- keyrings ----------------------------------------------------------------------------------


class Keyring:
    """The secrets one process holds, by key id; derives actor and seat keys from their masters."""

    def __init__(self, keys: Mapping[str, bytes], *, source: str = "keys given in code"):
        for key_id, secret in keys.items():
            if len(secret) < 16:
                raise TrustError(f"key {key_id!r} from {source} is {len(secret)} bytes; a key needs at least 16 (32 recommended)")
        self.keys = dict(keys)
        self.source = source
        self._seats: dict[tuple[str, str], bytes] = {}  # (trial, actor) -> seat key given by a join token
        self._derived: OrderedDict[tuple[str, str], bytes] = OrderedDict()
        self._memo: dict[str, bytes | None] = {}  # key id -> secret, for every id but seats (per trial)

    # --- making and storing ---------------------------------------------------------------
    @classmethod
    def generate(cls, roles: Iterable[str] = ROLES) -> Keyring:
        """A fresh keyring with a random 32-byte secret per role."""
        return cls({role: secrets.token_bytes(KEY_BYTES) for role in roles}, source="a generated keyring")

    def to_json(self) -> bytes:
        return orjson.dumps({"trialog_keyring": 1, "keys": {k: _b64(v) for k, v in sorted(self.keys.items())}}, option=orjson.OPT_INDENT_2)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write as JSON, readable by its owner only (created atomically: never half-written)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(self.to_json())
        os.replace(tmp, path)
        return path

    def restricted_to(self, implementation: str) -> Keyring:
        """What an actor service of ``implementation`` needs: its own actor key only."""
        key = self.key(actor_key_id(implementation))
        if key is None:
            raise TrustError(f"this keyring ({self.source}) holds neither {actor_key_id(implementation)!r} nor the actors master")
        return Keyring({actor_key_id(implementation): key}, source=f"{self.source}, restricted to {implementation}")

    @classmethod
    def from_json(cls, data: bytes, source: str) -> Keyring:
        try:
            doc = orjson.loads(data)
            keys = {str(k): _unb64(str(v)) for k, v in doc["keys"].items()}
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError, binascii.Error, ValueError) as exc:
            raise TrustError(
                f"{source} is not a Trialog keyring (expected JSON {{\"keys\": {{\"<key id>\": \"<base64url>\"}}}}): {exc}; "
                "make one with `trialog keyring generate FILE`"
            ) from None
        return cls(keys, source=source)

    @classmethod
    def from_directory(cls, folder: Path) -> Keyring:
        """One file per key id holding the base64url secret (a mounted Kubernetes Secret)."""
        keys = {}
        for f in sorted(folder.iterdir()):
            if f.name.startswith(".") or not f.is_file():
                continue  # Kubernetes keeps its ..data links and dot-dirs beside the keys
            try:
                keys[f.name] = _unb64(f.read_text().strip())
            except (binascii.Error, ValueError) as exc:
                raise TrustError(f"{f} does not hold a base64url key: {exc}") from None
        if not keys:
            raise TrustError(f"keyring directory {folder} holds no keys")
        return cls(keys, source=str(folder))

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Keyring | None:
        """``TRIALOG_KEY_<ID>`` variables (base64url), the key id upper-cased with ``.`` and ``-`` as ``_``:
        ``TRIALOG_KEY_ORCHESTRATOR``, ``TRIALOG_KEY_ACTORS_RANDOM`` (for ``actors.random``)."""
        found = {name[len("TRIALOG_KEY_") :]: value for name, value in environ.items() if name.startswith("TRIALOG_KEY_")}
        if not found:
            return None
        return _EnvironKeyring(found)

    @classmethod
    def load(cls, settings: Settings, environ: Mapping[str, str] | None = None) -> Keyring:
        """The keyring the settings name (``keyring``: a JSON file or a directory), else the
        ``TRIALOG_KEY_*`` variables, else — for a broker on this machine only — the local
        development keyring (made on first use, see :func:`dev_keyring_path`)."""
        environ = os.environ if environ is None else environ
        if settings.keyring:
            path = Path(settings.keyring).expanduser()
            if path.is_dir():
                return cls.from_directory(path)
            try:
                return cls.from_json(path.read_bytes(), str(path))
            except OSError as exc:
                raise TrustError(f"cannot read the keyring {path}: {exc.strerror}; make one with `trialog keyring generate {path}`") from None
        from_env = cls.from_environ(environ)
        if from_env is not None:
            return from_env
        if not _all_loopback(settings.bootstrap_servers):
            raise TrustError(
                f"no keyring for the cluster at {settings.bootstrap_servers}: records could not be tagged or verified. "
                "Make one with `trialog keyring generate FILE`, give it to every service with --keyring FILE "
                "(or TRIALOG_KEYRING), and to actor services a restricted one (`trialog keyring export`)"
            )
        return dev_keyring(environ)

    # --- lookups --------------------------------------------------------------------------------
    def _get(self, key_id: str) -> bytes | None:
        return self.keys.get(key_id)

    def key(self, key_id: str, trial_id: str = "") -> bytes | None:
        """The secret of a key id (``seat.<actor>`` needs the trial), or None if not held."""
        try:
            return self._memo[key_id]
        except KeyError:
            pass
        found = self._get(key_id)
        if found is None and key_id.startswith("seat."):
            actor = key_id[5:]
            given = self._seats.get((trial_id, actor))
            if given is not None:
                return given
            master = self._get(SEATS)
            return None if master is None else self._cached((trial_id, key_id), master, "seat", trial_id, actor)
        if found is None and key_id.startswith(ACTORS + "."):
            master = self._get(ACTORS)
            found = None if master is None else derive(master, ACTORS, key_id[len(ACTORS) + 1 :])
        if len(self._memo) > 10_000:
            self._memo.clear()
        self._memo[key_id] = found
        return found

    def _cached(self, cache_key: tuple[str, str], master: bytes, *parts: str) -> bytes:
        key = self._derived.get(cache_key)
        if key is None:
            key = self._derived[cache_key] = derive(master, *parts)
            if len(self._derived) > 100_000:
                self._derived.popitem(last=False)
        return key

    def add_seat(self, trial_id: str, actor: str, seat_key: bytes) -> None:
        """Hold one seat's key (what a client gets from its join token)."""
        self._seats[(trial_id, actor)] = seat_key

    def holds_sender_keys(self) -> bool:
        """Core keyring? (It holds a role key besides actor and seat keys.)"""
        return any(self._get(r) is not None for r in (ORCHESTRATOR, ENVIRONMENT, CONTROLLER, GATEWAY, LEARNER))

    def own_actor_keys(self) -> list[str]:
        """The actor key ids held explicitly (what a restricted actor service verifies with)."""
        return [k for k in self.keys if k.startswith(ACTORS + ".")]

    def describe(self) -> str:
        return f"{self.source}: " + ", ".join(sorted(self.keys))


class _EnvironKeyring(Keyring):
    """Keys from ``TRIALOG_KEY_*`` variables, looked up by normalized key id."""

    def __init__(self, found: Mapping[str, str]):
        keys = {}
        for name, value in found.items():
            try:
                keys[name] = _unb64(value.strip())
            except (binascii.Error, ValueError):
                raise TrustError(f"TRIALOG_KEY_{name} is not base64url") from None
        super().__init__(keys, source="TRIALOG_KEY_* environment variables")

    def _get(self, key_id: str) -> bytes | None:
        return self.keys.get(key_id.upper().replace(".", "_").replace("-", "_"))

    def own_actor_keys(self) -> list[str]:
        return [ACTORS + "." + k[len(ACTORS) + 1 :].lower() for k in self.keys if k.startswith("ACTORS_")]


def _all_loopback(bootstrap_servers: str) -> bool:
    for server in bootstrap_servers.split(","):
        host = server.strip().rpartition(":")[0].strip("[]")
        if host == "localhost":
            continue
        try:
            if not ipaddress.ip_address(host).is_loopback:
                return False
        except ValueError:
            return False
    return True


def dev_keyring_path(environ: Mapping[str, str] | None = None) -> Path:
    """Where the local development keyring lives: ``$XDG_STATE_HOME/trialog/dev-keyring.json``
    (default ``~/.local/state``), shared by every process of this user on this machine."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "trialog" / "dev-keyring.json"


def dev_keyring(environ: Mapping[str, str] | None = None) -> Keyring:
    """The local development keyring, made on first use (by whichever process comes first)."""
    path = dev_keyring_path(environ)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fresh = Keyring.generate()
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(fresh.to_json())
        try:
            os.link(tmp, path)  # atomic and exclusive: of two racing processes, one keyring wins
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return Keyring.from_json(path.read_bytes(), f"the development keyring {path}")


# --- tags -------------------------------------------------------------------------------------------


_LABEL_LP = _lp(MAC_LABEL)
_LENGTHS = [n.to_bytes(4, "big") for n in range(4096)]  # the length prefixes of most fields, made once


def mac_input(key: bytes, headers: Mapping[str, bytes], value: bytes) -> bytes:
    """The bytes a tag is computed over (see the module docstring). Runs for every record
    written and read, hence written out as one join rather than looped over ``MAC_HEADERS``."""
    g, n = headers.get, _LENGTHS
    kind, tick, sender, receiver = g("kind", b""), g("tick", b""), g("sender", b""), g("receiver", b"")
    id_, holder, takeover = g("id", b""), g(HEADER_HOLDER, b""), g(HEADER_TAKEOVER, b"")
    try:
        return b"".join((
            _LABEL_LP, n[len(key)], key, n[len(kind)], kind, n[len(tick)], tick, n[len(sender)], sender,
            n[len(receiver)], receiver, n[len(id_)], id_, n[len(holder)], holder, n[len(takeover)], takeover,
            len(value).to_bytes(4, "big"), value,
        ))  # fmt: skip
    except IndexError:  # a header longer than the table (a forged record, most likely)
        fields = (key, kind, tick, sender, receiver, id_, holder, takeover, value)
        return _LABEL_LP + b"".join(len(f).to_bytes(4, "big") + f for f in fields)


def compute_tag(secret: bytes, message: bytes) -> bytes:
    return hmac.digest(secret, message, "sha256")


_XOR_36 = bytes(b ^ 0x36 for b in range(256))  # HMAC's inner and outer pads, as translation tables
_XOR_5C = bytes(b ^ 0x5C for b in range(256))


class MacKey:
    """HMAC-SHA256 (RFC 2104) under one key with its two padded key blocks hashed once:
    per record that saves more than half of what :func:`compute_tag` costs (measured
    0.7 against 1.6 µs for a tick's record), and every record is tagged or checked."""

    __slots__ = ("_inner", "_outer")

    def __init__(self, secret: bytes):
        if len(secret) > 64:  # SHA-256's block size; longer keys are hashed first (RFC 2104)
            secret = hashlib.sha256(secret).digest()
        block = secret.ljust(64, b"\0")
        self._inner = hashlib.sha256(block.translate(_XOR_36))
        self._outer = hashlib.sha256(block.translate(_XOR_5C))

    def tag(self, message: bytes) -> bytes:
        inner = self._inner.copy()
        inner.update(message)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()


@dataclass(frozen=True, slots=True)
class Seat:
    """An actor of a trial played from outside the actor services."""

    trial_id: str
    actor: str
    holder: str
    takeover: bool = False


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
            a.name: (seat_key_id(a.name) if a.client else actor_key_id(a.implementation), a.actor_class) for a in trial.actors
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
        if kind in ADDRESSED_KINDS and (sender == "env" or sender.startswith("env/")):
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
            plan = self._remember(plans, (kind, sender, receiver), self._tag_plan(trial_id, kind.decode(), sender.decode(), receiver.decode()))
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
            if seat.takeover and kind == "actor.joined":
                seat_headers.append((HEADER_TAKEOVER, b"1"))
        allowed = self.sender_keys(trial_id, kind, sender)
        if isinstance(allowed, str):
            return f"cannot tag a record of trial {trial_id!r}: {allowed}"
        key_ids = [k for k in allowed if k == self.role] or list(allowed)
        own = next((k for k in key_ids if self.keyring.key(k, trial_id) is not None), None)
        if own is None:
            return (
                f"cannot write {kind} as {sender or self.role!r} in trial {trial_id!r}: this process holds none of the keys "
                f"{', '.join(allowed)} ({self.keyring.source})"
            )
        out = []
        for key_id in [own, *(k for k in self.audience_keys(trial_id, kind, receiver) if k != own)]:
            secret = self.keyring.key(key_id, trial_id)
            if secret is not None:
                out.append((MAC_PREFIX + key_id, self._mac_key(secret)))
        return seat_headers, out

    # --- checking ---------------------------------------------------------------------------------------
    def check(self, key: bytes | None, headers: Sequence[tuple[str, bytes]], value: bytes | None) -> str | None:
        """None if the record was written by a key allowed to write it, else the reason."""
        h = dict(headers)
        kind, sender, key = h.get("kind") or b"", h.get("sender") or b"", key or b""
        plans = self._plans.get(key) or self._plans_of(key)  # the lookup inline: every record passes here
        plan = plans.get((kind, sender))
        if plan is None:
            plan = self._remember(plans, (kind, sender), self._check_plan(key.decode(errors="replace"), kind, sender))
        if isinstance(plan, str):
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

    def _check_plan(self, trial_id: str, kind_bytes: bytes, sender_bytes: bytes) -> tuple[list, str, tuple[str, str]] | str:
        """([(tag header, key id, MacKey)] this process verifies such records with, the reason if
        none of those tags is there, the reason if none matches), or why such a record is
        refused whatever its tags."""
        try:
            kind, sender = kind_bytes.decode(), sender_bytes.decode()
        except UnicodeDecodeError:
            return "kind or sender header is not UTF-8"
        allowed = self.sender_keys(trial_id, kind, sender)
        if isinstance(allowed, str):
            return allowed
        held = [k for k in allowed if self.keyring.key(k, trial_id) is not None]
        if not held and kind in TO_ACTORS:
            # An actor service or a seat: records the core addressed to it carry its own key.
            held = [*self.keyring.own_actor_keys(), *(seat_key_id(a) for (t, a) in self._seats if t == trial_id)]
        if not held:
            return f"{kind} needs a tag by {' or '.join(allowed)}; this service holds none of those keys"
        verifiers = [(MAC_PREFIX + k, k, self._mac_key(secret)) for k in held if (secret := self.keyring.key(k, trial_id)) is not None]
        untagged = f"{kind} from {sender!r} is not tagged by {' or '.join(allowed)} (forged, or written without the key)"
        mismatch = (f"{kind} from {sender!r}: the tag of ", " does not match the record (forged or altered)")
        return verifiers, untagged, mismatch


# --- seats ------------------------------------------------------------------------------------------------


class SeatBook:
    """Who holds each seat, from the ``actor.joined`` records of the log (read in log order)."""

    KEPT = 100_000  # seats remembered (a service may see the joins of trials it does not host)

    def __init__(self) -> None:
        self._holders: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._first_offset: dict[str, int] = {}  # trial -> offset of its first join (to rebuild from)

    def joined(self, trial_id: str, actor: str, holder: str, takeover: bool, offset: int | None = None) -> tuple[str | None, str | None]:
        """Apply a (verified) join: returns (refusal reason or None, the holder it displaced or None)."""
        if offset is not None:
            self._first_offset.setdefault(trial_id, offset)
        current = self._holders.get((trial_id, actor))
        if current is None or current == holder or takeover:
            self._holders[(trial_id, actor)] = holder
            while len(self._holders) > self.KEPT:
                (gone, _), _ = self._holders.popitem(last=False)
                self._first_offset.pop(gone, None)
            return None, None if current == holder else current
        return f"seat {actor} of trial {trial_id} is held by another holder; join with takeover to take it over", None

    def refuses(self, trial_id: str, actor: str, holder: str) -> str | None:
        """Why a seat record from ``holder`` does not count (None: it counts)."""
        current = self._holders.get((trial_id, actor))
        if current is None:
            return f"{actor} of trial {trial_id} has not joined"
        if current != holder:
            return f"{actor} of trial {trial_id} is held by another holder (the seat was taken over, or never given to this one)"
        return None

    def first_offset(self, trial_id: str) -> int | None:
        """Where the seats of a trial were first joined: a service rebuilding the trial starts there."""
        return self._first_offset.get(trial_id)

    def forget(self, trial_id: str) -> None:
        self._first_offset.pop(trial_id, None)
        for k in [k for k in self._holders if k[0] == trial_id]:
            del self._holders[k]


def seat_headers(headers: Sequence[tuple[str, bytes]]) -> tuple[str, bool]:
    """(holder, takeover) of a seat record."""
    h = dict(headers)
    return (h.get(HEADER_HOLDER) or b"").decode(errors="replace"), h.get(HEADER_TAKEOVER) == b"1"


# --- join tokens -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinToken:
    trial_id: str
    actor: str
    expires_at: int  # Unix seconds
    seat_key: bytes


def _token_key(keyring: Keyring) -> bytes:
    master = keyring.key(SEATS)
    if master is None:
        raise TrustError(f"join tokens need the seats key, which {keyring.source} does not hold")
    return derive(master, "join-token")


def mint_join_token(keyring: Keyring, trial_id: str, actor: str, *, ttl_s: float = 3600, now: float | None = None) -> str:
    """A self-contained, expiring token for one seat of one trial (no round trip)."""
    seat_key = keyring.key(seat_key_id(actor), trial_id)
    key = _token_key(keyring)
    assert seat_key is not None  # the seats master is held (checked above)
    expires = int((time.time() if now is None else now) + ttl_s)
    payload = _b64(orjson.dumps({"actor": actor, "exp": expires, "seat_key": _b64(seat_key), "trial": trial_id}, option=orjson.OPT_SORT_KEYS))
    signed = TOKEN_PREFIX + payload
    return f"{signed}.{_b64(compute_tag(key, signed.encode()))}"


def read_join_token(token: str) -> JoinToken:
    """The claims of a token, unverified (a client reads its seat key; the log decides the rest)."""
    try:
        if not token.startswith(TOKEN_PREFIX):
            raise ValueError("does not start with tl1.")
        payload, _mac = token[len(TOKEN_PREFIX) :].split(".")
        claims = orjson.loads(_unb64(payload))
        return JoinToken(str(claims["trial"]), str(claims["actor"]), int(claims["exp"]), _unb64(str(claims["seat_key"])))
    except (ValueError, KeyError, TypeError, binascii.Error, orjson.JSONDecodeError) as exc:
        raise TrustError(f"not a Trialog join token ({exc}); ask for a new join link", reason="malformed") from None


def verify_join_token(keyring: Keyring, token: str, *, trial_id: str | None = None, actor: str | None = None, now: float | None = None) -> JoinToken:
    """The token's claims if it is genuine, unexpired and for this trial and actor; else
    :class:`TrustError` whose ``reason`` is malformed, forged, expired, wrong_trial or wrong_actor."""
    claims = read_join_token(token)
    signed, _, mac = token.rpartition(".")
    try:
        genuine = hmac.compare_digest(compute_tag(_token_key(keyring), signed.encode()), _unb64(mac))
    except (binascii.Error, ValueError):
        genuine = False
    if not genuine or keyring.key(seat_key_id(claims.actor), claims.trial_id) != claims.seat_key:
        raise TrustError("this join link was not issued by this deployment (forged or altered)", reason="forged")
    if (time.time() if now is None else now) >= claims.expires_at:
        raise TrustError(f"this join link expired at {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(claims.expires_at))}; ask for a new one", reason="expired")
    if trial_id is not None and claims.trial_id != trial_id:
        raise TrustError(f"this join link is for trial {claims.trial_id}, not {trial_id}", reason="wrong_trial")
    if actor is not None and claims.actor != actor:
        raise TrustError(f"this join link is for seat {claims.actor}, not {actor}", reason="wrong_actor")
    return claims


# --- command line ------------------------------------------------------------------------------------------


def add_cli(sub) -> None:
    """``trialog keyring generate|export|token``."""
    keyring = sub.add_parser("keyring", help="Make the deployment's keyring, restricted keyrings for actor services, join tokens.")
    ksub = keyring.add_subparsers(metavar="ACTION")
    generate = ksub.add_parser("generate", help="Write a new keyring (a random 32-byte secret per role), readable by its owner only.")
    generate.add_argument("file", metavar="FILE")
    generate.add_argument("--force", action="store_true", help="replace an existing file")
    export = ksub.add_parser("export", help="Write the keyring an actor service of one implementation gets: its own key only.")
    export.add_argument("file", metavar="FILE", help="the deployment's keyring")
    export.add_argument("--implementation", required=True, metavar="NAME")
    export.add_argument("--out", required=True, metavar="FILE")
    files = ksub.add_parser("files", help="Write one file per key id (what a Kubernetes Secret holds), actor keys derived for each --implementation.")
    files.add_argument("file", metavar="FILE", help="the deployment's keyring")
    files.add_argument("folder", metavar="DIR")
    files.add_argument("--implementation", action="append", default=[], metavar="NAME", help="an actor implementation to derive actors.NAME for (repeatable)")
    token = ksub.add_parser("token", help="Print a join token for one seat of one trial (needs the seats key).")
    token.add_argument("file", metavar="FILE", help="a keyring holding the seats key")
    token.add_argument("--trial", required=True, metavar="TRIAL_ID")
    token.add_argument("--actor", required=True, metavar="NAME")
    token.add_argument("--ttl", type=float, default=3600.0, metavar="SECONDS")

    def do_generate(args) -> int:
        if Path(args.file).exists() and not args.force:
            raise TrustError(f"{args.file} exists; pass --force to replace it (every service then needs the new one)")
        print(Keyring.generate().save(args.file))
        return 0

    def load(path: str) -> Keyring:
        try:
            return Keyring.from_json(Path(path).read_bytes(), path)
        except OSError as exc:
            raise TrustError(f"cannot read the keyring {path}: {exc.strerror}") from None

    def do_export(args) -> int:
        print(load(args.file).restricted_to(args.implementation).save(args.out))
        return 0

    def do_files(args) -> int:
        ring = load(args.file)
        keys = dict(ring.keys)
        for name in args.implementation:
            keys[actor_key_id(name)] = ring.restricted_to(name).keys[actor_key_id(name)]
        folder = Path(args.folder)
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        for key_id, secret in sorted(keys.items()):
            fd = os.open(folder / key_id, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(_b64(secret))
        print(folder)
        return 0

    def do_token(args) -> int:
        print(mint_join_token(load(args.file), args.trial, args.actor, ttl_s=args.ttl))
        return 0

    generate.set_defaults(func=do_generate)
    export.set_defaults(func=do_export)
    files.set_defaults(func=do_files)
    token.set_defaults(func=do_token)
