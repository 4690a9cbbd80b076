"""Keyrings, record tags, seats and join tokens (trialog.trust), without a broker."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import struct

import pytest

from trialog.protocol.events import Action, ActorClassSpec, ActorSpec, Observation, Reward, TrialEnded, TrialStarted
from trialog.settings import Settings
from trialog.trust.authenticator import Authenticator
from trialog.trust.join_tokens import mint_join_token, read_join_token, verify_join_token
from trialog.trust.keys import Keyring, TrustError, actor_key_id, derive, dev_keyring
from trialog.trust.seats import Seat, SeatBook
from trialog.trust.tags import mac_input

TRIAL = "t-1"
STARTED = TrialStarted(
    TRIAL,
    spec="rps",
    environment="rps",
    environment_entry="x:Y",
    environment_config="{}",
    actors=(ActorSpec("alice", "player", "random"), ActorSpec("bob", "player", "human", client=True)),
    actor_classes=(ActorClassSpec("player", "{}", "{}"),),
    seed=1,
)


def record(event, trust: Authenticator) -> tuple[bytes, list, bytes]:
    value = b"\xc3\x01body-of-" + event.KIND.encode()
    headers = event.headers()
    return event.trial_id.encode(), headers + trust.tag(event.trial_id, headers, value), value


@pytest.fixture
def keyring() -> Keyring:
    return Keyring.generate()


@pytest.fixture
def core(keyring) -> Authenticator:
    trust = Authenticator(keyring)
    trust.learn(STARTED)
    return trust


def test_mac_input_is_the_documented_length_prefixed_layout():
    lp = lambda b: struct.pack(">I", len(b)) + b  # noqa: E731
    got = mac_input(b"T", {"kind": b"action", "tick": b"3", "sender": b"alice", "holder": b"h"}, b"V")
    want = (
        lp(b"trialog.mac.v1")
        + lp(b"T")
        + lp(b"action")
        + lp(b"3")
        + lp(b"alice")
        + lp(b"")
        + lp(b"")
        + lp(b"h")
        + lp(b"")
        + lp(b"V")
    )
    assert got == want
    # Fields longer than the table of length prefixes take the general path: same layout.
    long = b"r" * 70_000
    got = mac_input(b"T", {"kind": b"message", "receiver": long, "id": b"m" * 5000}, long)
    assert got == lp(b"trialog.mac.v1") + lp(b"T") + lp(b"message") + lp(b"") + lp(b"") + lp(long) + lp(
        b"m" * 5000
    ) + lp(b"") + lp(b"") + lp(long)
    assert derive(b"k" * 32, "actors", "random") == hmac.digest(
        b"k" * 32, lp(b"trialog.key.v1") + lp(b"actors") + lp(b"random"), hashlib.sha256
    )


def test_genuine_records_pass_and_forged_or_altered_ones_do_not(core, keyring):
    for event in (
        STARTED,
        Observation(TRIAL, tick=1, actor="alice"),
        Action(TRIAL, tick=1, actor="alice"),
        Reward(TRIAL, tick=1, sender="env"),
    ):
        key, headers, value = record(event, core)
        assert core.check(key, headers, value) is None, event.KIND
        assert "does not match" in core.check(key, headers, value + b"x")
        assert core.check(b"t-2", headers, value) is not None  # moved to another trial
        untagged = [h for h in headers if not h[0].startswith("mac.")]
        assert "not tagged" in core.check(key, untagged, value)
    # Someone with another deployment's keys (or none) cannot write a lifecycle record.
    stranger = Authenticator(Keyring.generate())
    key, headers, value = record(TrialEnded(TRIAL, tick=3, reason="terminated"), stranger)
    assert "does not match" in core.check(key, headers, value)


def test_each_kind_counts_only_from_its_sender(core, keyring):
    # The environment's key does not make a lifecycle record, nor an actor's action.
    env_only = Authenticator(Keyring({"environment": keyring.key("environment")}))
    env_only.learn(STARTED)
    with pytest.raises(TrustError, match="holds none of the keys orchestrator"):
        record(TrialEnded(TRIAL, tick=3), env_only)
    # An actor service may only act as its own actors, and never reward as the environment.
    random_service = Authenticator(keyring.restricted_to("random"))
    random_service.learn(STARTED)
    key, headers, value = record(Action(TRIAL, tick=1, actor="alice"), random_service)
    assert core.check(key, headers, value) is None
    with pytest.raises(TrustError, match="seat.bob"):
        record(Action(TRIAL, tick=1, actor="bob"), random_service)
    with pytest.raises(TrustError, match="environment"):
        record(Reward(TRIAL, tick=1, sender="env", value=9.0), random_service)
    # An action tagged with alice's key but claiming to be bob's is refused.
    key, headers, value = record(Action(TRIAL, tick=1, actor="alice"), random_service)
    headers = [(k, b"bob" if k == "sender" else v) for k, v in headers]
    assert "not tagged by seat.bob" in core.check(key, headers, value)
    assert "not an actor of a known trial" in core.check(b"unknown", *record(Action(TRIAL, actor="alice"), core)[1:])


def test_an_actor_service_verifies_what_is_addressed_to_it_with_its_own_key(core, keyring):
    random_service = Authenticator(keyring.restricted_to("random"))
    random_service.learn(STARTED)
    for event in (
        STARTED,
        Observation(TRIAL, tick=1, actor="alice"),
        Reward(TRIAL, tick=1, receiver="*", sender="env"),
    ):
        key, headers, value = record(event, core)
        assert random_service.check(key, headers, value) is None, event.KIND
    # Not addressed to alice: no tag for the random implementation, so it cannot tell.
    key, headers, value = record(Observation(TRIAL, tick=1, actor="bob"), core)
    assert random_service.check(key, headers, value) is not None
    # A record it cannot tell anything about: a seat's action (bob's key is not its own).
    seat = Authenticator(Keyring({}))
    seat.hold(Seat(TRIAL, "bob", "h1"), keyring.key("seat.bob", TRIAL))
    assert "holds none" in random_service.check(*record(Action(TRIAL, tick=1, actor="bob"), seat))


def test_seats_are_tagged_with_the_seat_key_and_holder(core, keyring):
    token = mint_join_token(keyring, TRIAL, "bob")
    client = Authenticator(Keyring({}))
    client.hold(Seat(TRIAL, "bob", holder="h1"), read_join_token(token).seat_key)
    key, headers, value = record(Action(TRIAL, tick=2, actor="bob"), client)
    assert dict(headers)["holder"] == b"h1" and "mac.seat.bob" in dict(headers)
    assert core.check(key, headers, value) is None
    # The holder is covered by the tag: another holder id cannot be pasted in.
    changed = [(k, b"h2" if k == "holder" else v) for k, v in headers]
    assert "does not match" in core.check(key, changed, value)
    # The seat's key is bob's of this trial only.
    assert client.check(*record(Observation(TRIAL, tick=2, actor="bob"), core)) is None
    other_trial = Authenticator(Keyring({}))
    other_trial.hold(Seat(TRIAL, "bob", holder="h1"), read_join_token(mint_join_token(keyring, "t-2", "bob")).seat_key)
    assert "does not match" in core.check(*record(Action(TRIAL, tick=2, actor="bob"), other_trial))


def test_seat_book_one_holder_resume_and_takeover():
    book = SeatBook()
    assert book.joined(TRIAL, "bob", "h1", False, offset=7) == (None, None)
    assert book.joined(TRIAL, "bob", "h1", False) == (None, None)  # reconnect: resumes
    refusal, _ = book.joined(TRIAL, "bob", "h2", False)
    assert "held by another holder" in refusal
    assert book.refuses(TRIAL, "bob", "h2") and book.refuses(TRIAL, "bob", "h1") is None
    assert book.joined(TRIAL, "bob", "h2", True) == (None, "h1")
    assert "held by another holder" in book.refuses(TRIAL, "bob", "h1")
    assert book.first_offset(TRIAL) == 7
    assert "has not joined" in book.refuses(TRIAL, "carol", "h1")


def test_join_tokens_say_why_they_are_refused(keyring):
    token = mint_join_token(keyring, TRIAL, "bob", ttl_s=60, now=1000)
    claims = verify_join_token(keyring, token, trial_id=TRIAL, actor="bob", now=1010)
    assert (claims.trial_id, claims.actor, claims.expires_at) == (TRIAL, "bob", 1060)
    assert claims.seat_key == keyring.key("seat.bob", TRIAL)

    def reason(tok, **kw):
        with pytest.raises(TrustError) as err:
            verify_join_token(keyring, tok, **{"now": 1010, **kw})
        return err.value.reason

    assert reason(token, now=2000) == "expired"
    assert reason(token, trial_id="t-2") == "wrong_trial"
    assert reason(token, actor="alice") == "wrong_actor"
    assert reason("hello") == "malformed"
    assert reason(mint_join_token(Keyring.generate(), TRIAL, "bob", now=1000)) == "forged"
    # Changing a claim (say, the actor) breaks the MAC.
    prefix, payload, mac = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["actor"] = "alice"
    forged_payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    assert reason(f"{prefix}.{forged_payload}.{mac}") == "forged"


def test_keyrings_load_from_file_directory_and_environment(tmp_path, keyring):
    path = keyring.save(tmp_path / "keyring.json")
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    settings = Settings.load({"keyring": str(path), "bootstrap_servers": "kafka.example:9093"}, environ={})
    assert Keyring.load(settings, environ={}).key("orchestrator") == keyring.key("orchestrator")
    folder = tmp_path / "mounted"
    folder.mkdir()
    (folder / "actors.random").write_text(base64.urlsafe_b64encode(keyring.key(actor_key_id("random"))).decode() + "\n")
    (folder / "..data").mkdir()
    loaded = Keyring.load(Settings.load({"keyring": str(folder)}, environ={}), environ={})
    assert loaded.own_actor_keys() == ["actors.random"] and loaded.key("orchestrator") is None
    env = {"TRIALOG_KEY_ACTORS_RANDOM": base64.urlsafe_b64encode(keyring.key("actors.random")).decode()}
    from_env = Keyring.load(Settings.load({}, environ={}), environ=env)
    assert from_env.key("actors.random") == keyring.key("actors.random") and from_env.own_actor_keys() == [
        "actors.random"
    ]
    with pytest.raises(TrustError, match="no keyring for the cluster"):
        Keyring.load(Settings.load({"bootstrap_servers": "kafka.example:9093"}, environ={}), environ={})
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(TrustError, match="not a Trialog keyring"):
        Keyring.load(Settings.load({"keyring": str(tmp_path / "bad.json")}, environ={}), environ={})


def test_the_development_keyring_is_made_once_and_shared(tmp_path):
    environ = {"XDG_STATE_HOME": str(tmp_path)}
    first, second = dev_keyring(environ), dev_keyring(environ)
    assert first.keys == second.keys and set(first.keys) >= {"orchestrator", "environment", "actors", "seats"}
    assert (tmp_path / "trialog" / "dev-keyring.json").stat().st_mode & 0o077 == 0


def test_keyring_commands_and_the_cost_tool(tmp_path, capsys):
    from tools import trust_cost
    from trialog import cli

    ring, restricted = tmp_path / "keyring.json", tmp_path / "random.json"
    assert cli.main(["keyring", "generate", str(ring)]) == 0
    assert cli.main(["keyring", "generate", str(ring)]) == 1  # never overwritten by accident
    assert cli.main(["keyring", "export", str(ring), "--implementation", "random", "--out", str(restricted)]) == 0
    assert cli.main(["keyring", "token", str(ring), "--trial", "t1", "--actor", "bob", "--ttl", "60"]) == 0
    token = capsys.readouterr().out.strip().splitlines()[-1]
    full = Keyring.from_json(ring.read_bytes(), "ring")
    assert verify_join_token(full, token, trial_id="t1", actor="bob").actor == "bob"
    assert json.loads(restricted.read_text())["keys"].keys() == {"actors.random"}
    assert Keyring.from_json(restricted.read_bytes(), "r").key("actors.random") == full.key("actors.random")
    keys = tmp_path / "keys"
    assert cli.main(["keyring", "files", str(ring), str(keys), "--implementation", "random"]) == 0
    mounted = Keyring.from_directory(keys)  # what a pod sees of a mounted Secret
    assert mounted.key("orchestrator") == full.key("orchestrator") and mounted.keys["actors.random"] == full.key(
        "actors.random"
    )
    assert trust_cost.main(["--records", "50", "--repeat", "1"]) == 0
    assert "| action |" in capsys.readouterr().out


def test_forged_headers_cannot_grow_the_per_trial_policy_cache_without_bound(core):
    key, headers, value = record(Action(TRIAL, tick=1, actor="alice"), core)
    for i in range(3 * Authenticator.PLANS_KEPT):  # a forger varies the sender header
        forged = [(k, f"mallory-{i}".encode() if k == "sender" else v) for k, v in headers]
        assert core.check(key, forged, value) is not None
        assert len(core._plans[key]) <= Authenticator.PLANS_KEPT
    assert core.check(key, headers, value) is None  # the genuine record still passes


def test_trials_share_the_hashed_role_keys(keyring):
    trust = Authenticator(keyring, "environment")
    second = dataclasses.replace(STARTED, trial_id="t-2")
    trust.learn(STARTED)
    trust.learn(second)
    first_plan = trust._tag_plan(TRIAL, "observation", "env", "alice")
    second_plan = trust._tag_plan("t-2", "observation", "env", "alice")
    assert [mac for _, mac in first_plan[1]] and [mac for _, mac in first_plan[1]] == [mac for _, mac in second_plan[1]]
    assert all(a is b for (_, a), (_, b) in zip(first_plan[1], second_plan[1]))


def test_trials_share_the_check_of_what_a_role_writes_and_it_still_refuses(core, keyring):
    """A lifecycle or environment record is checked the same way in every trial: one plan,
    made once. Shared, it still refuses what it refused per trial: an untagged record, a
    stranger's tag, a record moved from one trial to another, and a forged sender."""
    second = dataclasses.replace(STARTED, trial_id="t-2")
    core.learn(second)
    for event in (TrialEnded(TRIAL, tick=3, reason="terminated"), Observation(TRIAL, tick=1, actor="alice")):
        key, headers, value = record(event, core)
        other = dataclasses.replace(event, trial_id="t-2")
        key2, headers2, value2 = record(other, core)
        assert core.check(key, headers, value) is None and core.check(key2, headers2, value2) is None
        plan = core._plans[key][(event.KIND.encode(), event.SENDER.encode())]
        assert plan is core._plans[key2][(event.KIND.encode(), event.SENDER.encode())], event.KIND
        assert "does not match" in core.check(key2, headers, value)  # the first trial's record, moved
        assert "not tagged" in core.check(key2, [h for h in headers2 if not h[0].startswith("mac.")], value2)
        stranger = Authenticator(Keyring.generate())
        stranger.learn(second)
        assert "does not match" in core.check(key2, *record(other, stranger)[1:])
    # An actor's action is no role's: its check stays per trial (its key is the actor's).
    action_plan = core._check_plan(TRIAL, b"action", b"alice")
    assert action_plan is not core._check_plan("t-2", b"action", b"alice")
    # Forged senders of a role's kind cannot grow the shared plans without bound either.
    key, headers, value = record(TrialEnded(TRIAL, tick=3), core)
    for i in range(3 * Authenticator.PLANS_KEPT):
        forged = [(k, f"mallory-{i}".encode() if k == "sender" else v) for k, v in headers]
        assert core.check(key, forged, value) is not None
        assert len(core._role_checks) <= Authenticator.PLANS_KEPT
