"""The record-tag, derived-key and join-token vectors (``schemas/vectors/trust.json``)
hold for the code of :mod:`trialog.trust` and for the rules docs/protocol.md states,
computed here again from the standard library alone: a change of the encoding on either
side fails here. (That the committed file is what ``tools/make_vectors.py`` writes today is
tests/unit/test_vectors.py's check.)"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import struct
from pathlib import Path

import pytest

from trialog.protocol.codec import SchemaStore
from trialog.protocol.event_codec import EventCodec
from trialog.trust.authenticator import Authenticator
from trialog.trust.join_tokens import read_join_token, verify_join_token
from trialog.trust.keys import Keyring, derive
from trialog.trust.tags import MacKey, mac_input

VECTORS = Path(__file__).resolve().parents[2] / "schemas" / "vectors"
TRUST = json.loads((VECTORS / "trust.json").read_text(encoding="utf-8"))
MANIFEST = {v["name"]: v for v in json.loads((VECTORS / "manifest.json").read_text(encoding="utf-8"))["vectors"]}
# The order of the tag's input, as docs/protocol.md writes it (between the record key and the value).
MAC_HEADERS = ("kind", "tick", "sender", "receiver", "id", "holder", "takeover")


def lp(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def unpadded_b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def keyring() -> Keyring:
    return Keyring.from_json(json.dumps(TRUST["keyring"]).encode(), "trust.json")


def test_the_keyring_is_versioned_json_of_unpadded_base64url_keys():
    assert TRUST["keyring"]["trialog_keyring"] == 1
    assert all("=" not in v and len(base64.urlsafe_b64decode(v + "=")) == 32 for v in TRUST["keyring"]["keys"].values())
    assert json.loads(keyring().to_json()) == TRUST["keyring"]


@pytest.mark.parametrize("vector", TRUST["derived_keys"], ids=lambda v: v["key_id"])
def test_derived_keys(vector):
    master = keyring().keys[vector["master"]]
    message = lp(b"trialog.key.v1") + b"".join(lp(p.encode()) for p in vector["parts"])
    assert message.hex() == vector["input_hex"]
    key = hmac.new(master, message, hashlib.sha256).digest()
    assert key.hex() == vector["key_hex"]
    assert unpadded_b64url(key) == vector["key_b64url"]
    assert derive(master, *vector["parts"]) == key


def test_the_keyring_derives_the_actor_and_seat_keys_of_the_vectors():
    ring, trial = keyring(), TRUST["join_token"]["trial"]
    for vector in TRUST["derived_keys"]:
        if vector["key_id"] != "join-token":
            assert ring.key(vector["key_id"], trial).hex() == vector["key_hex"]


def _key(key_id: str) -> bytes:
    return keyring().key(key_id, TRUST["join_token"]["trial"])


@pytest.mark.parametrize("vector", TRUST["tags"], ids=lambda v: v["vector"])
def test_tags(vector):
    value = (VECTORS / MANIFEST[vector["vector"]]["file"]).read_bytes()
    headers = {k: v.encode() for k, v in vector["headers"].items()}
    message = lp(b"trialog.mac.v1") + lp(vector["record_key"].encode())
    message += b"".join(lp(headers.get(name, b"")) for name in MAC_HEADERS) + lp(value)
    assert message.hex() == vector["mac_input_hex"]
    assert mac_input(vector["record_key"].encode(), headers, value) == message
    assert vector["tags"], "a record without a tag"
    for header, tag_hex in vector["tags"].items():
        key = _key(header.removeprefix("mac."))
        tag = hmac.new(key, message, hashlib.sha256).digest()
        assert len(tag) == 32 and tag.hex() == tag_hex
        assert MacKey(key).tag(message) == tag


def test_a_record_the_vectors_tag_passes_trialogs_check_and_fails_once_altered():
    vector = next(v for v in TRUST["tags"] if v["vector"] == "event.action")
    value = (VECTORS / MANIFEST["event.action"]["file"]).read_bytes()
    started_entry = MANIFEST["event.trial.started"]
    started = EventCodec(SchemaStore.with_builtin()).decode(
        (VECTORS / started_entry["file"]).read_bytes(), started_entry["kafka"]["headers"]["kind"]
    )
    verifier = Authenticator(keyring(), role="environment")
    verifier.learn(started)
    headers = [(k, v.encode()) for k, v in vector["headers"].items()]
    headers += [(k, bytes.fromhex(v)) for k, v in vector["tags"].items()]
    key = vector["record_key"].encode()
    assert verifier.check(key, headers, value) is None
    assert verifier.check(key, headers, value[:-1] + bytes([value[-1] ^ 1])) is not None


def test_the_join_token():
    vector = TRUST["join_token"]
    token = vector["token"]
    prefix, payload, mac = token.split(".")
    assert prefix == "tl1" and "=" not in payload + mac
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert claims == {
        "actor": vector["actor"],
        "exp": vector["exp"],
        "seat_key": vector["seat_key_b64url"],
        "trial": vector["trial"],
    }
    token_key = _key_of_derived(vector["mac_key"])
    assert unpadded_b64url(hmac.new(token_key, f"tl1.{payload}".encode(), hashlib.sha256).digest()) == mac
    assert read_join_token(token).seat_key == _key(f"seat.{vector['actor']}")
    assert verify_join_token(keyring(), token, trial_id=vector["trial"], actor=vector["actor"], now=vector["now"])


def _key_of_derived(key_id: str) -> bytes:
    return bytes.fromhex(next(v["key_hex"] for v in TRUST["derived_keys"] if v["key_id"] == key_id))
