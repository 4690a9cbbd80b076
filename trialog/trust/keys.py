"""Keys: key ids, how actor and seat keys are derived, and the keyring a process holds.

A deployment's :class:`Keyring` holds one secret per *key id*:

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

(The role key ids are the names of :mod:`trialog.protocol.roles`.)

Core services (orchestrator, environment, logger, gateway, learner, operator CLI)
hold the whole keyring; an actor service holds only ``actors.<impl>`` (export one
with ``trialog keyring export --implementation IMPL``); a client seat holds only its
seat key, which its join token carries (:mod:`trialog.trust.join_tokens`).

``derive(master, *parts) = HMAC-SHA256(master, LP("trialog.key.v1") || LP(part)...)``
where ``LP(x)`` is the 4-byte big-endian length of the UTF-8 bytes of ``x``, then the
bytes. So ``actors.<impl>`` = ``derive(actors, "actors", impl)`` and
``seat.<actor>`` of trial T = ``derive(seats, "seat", T, actor)``.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import os
import secrets
import struct
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from trialog.errors import TrialogError
from trialog.protocol.roles import ACTORS, CONTROLLER, ENVIRONMENT, GATEWAY, LEARNER, ORCHESTRATOR, ROLES, SEATS

if TYPE_CHECKING:
    from trialog.settings import Settings

KEY_LABEL = b"trialog.key.v1"
KEY_BYTES = 32


class TrustError(TrialogError):
    """A key is missing, a keyring is malformed, or a token is refused (``reason`` says which)."""

    def __init__(self, message: str, *, reason: str = ""):
        super().__init__(message)
        self.reason = reason


def length_prefixed(data: bytes) -> bytes:
    """``LP(data)``: the 4-byte big-endian length of ``data``, then ``data``."""
    return struct.pack(">I", len(data)) + data


def derive(master: bytes, *parts: str) -> bytes:
    """A sub-key: HMAC-SHA256(master, LP("trialog.key.v1") || LP(part)...)."""
    message = length_prefixed(KEY_LABEL) + b"".join(length_prefixed(p.encode()) for p in parts)
    return hmac.digest(master, message, "sha256")


def actor_key_id(implementation: str) -> str:
    return f"{ACTORS}.{implementation}"


def seat_key_id(actor: str) -> str:
    return f"seat.{actor}"


def b64url(data: bytes) -> str:
    """Base64url without padding (keys in keyrings, join tokens)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    """The bytes of base64url text, with or without padding."""
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


# --- keyrings ----------------------------------------------------------------------------------


class Keyring:
    """The secrets one process holds, by key id; derives actor and seat keys from their masters."""

    def __init__(self, keys: Mapping[str, bytes], *, source: str = "keys given in code"):
        for key_id, secret in keys.items():
            if len(secret) < 16:
                raise TrustError(
                    f"key {key_id!r} from {source} is {len(secret)} bytes; a key needs at least 16 (32 recommended)"
                )
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
        return orjson.dumps(
            {"trialog_keyring": 1, "keys": {k: b64url(v) for k, v in sorted(self.keys.items())}},
            option=orjson.OPT_INDENT_2,
        )

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
            raise TrustError(
                f"this keyring ({self.source}) holds neither {actor_key_id(implementation)!r} nor the actors master"
            )
        return Keyring({actor_key_id(implementation): key}, source=f"{self.source}, restricted to {implementation}")

    @classmethod
    def from_json(cls, data: bytes, source: str) -> Keyring:
        try:
            doc = orjson.loads(data)
            keys = {str(k): unb64url(str(v)) for k, v in doc["keys"].items()}
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError, binascii.Error, ValueError) as exc:
            raise TrustError(
                f'{source} is not a Trialog keyring (expected JSON {{"keys": {{"<key id>": "<base64url>"}}}}): {exc}; '
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
                keys[f.name] = unb64url(f.read_text().strip())
            except (binascii.Error, ValueError) as exc:
                raise TrustError(f"{f} does not hold a base64url key: {exc}") from None
        if not keys:
            raise TrustError(f"keyring directory {folder} holds no keys")
        return cls(keys, source=str(folder))

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Keyring | None:
        """``TRIALOG_KEY_<ID>`` variables (base64url), the key id upper-cased with ``.`` and ``-`` as ``_``:
        ``TRIALOG_KEY_ORCHESTRATOR``, ``TRIALOG_KEY_ACTORS_RANDOM`` (for ``actors.random``)."""
        found = {
            name[len("TRIALOG_KEY_") :]: value for name, value in environ.items() if name.startswith("TRIALOG_KEY_")
        }
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
                raise TrustError(
                    f"cannot read the keyring {path}: {exc.strerror}; make one with `trialog keyring generate {path}`"
                ) from None
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
                keys[name] = unb64url(value.strip())
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
