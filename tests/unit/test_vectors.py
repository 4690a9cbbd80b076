"""The Python side of the language-neutral proof: the committed test vectors
(``schemas/vectors/``) decode, with the Python codec, to exactly the values their
manifest states — the same manifest the Java checker (``interop/java``) holds Java's
Avro to. The vectors must also be what ``tools/make_vectors.py`` writes today.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from trialog.errors import CodecError
from trialog.protocol import events as ev
from trialog.protocol.codec import SUPPORTED_DTYPES, SchemaStore
from trialog.protocol.event_codec import EventCodec
from trialog.protocol.owners import check_headers

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "schemas" / "vectors"
MANIFEST = json.loads((VECTORS / "manifest.json").read_text(encoding="utf-8"))
ENTRIES = {v["name"]: v for v in MANIFEST["vectors"]}


def _load_generator() -> Any:
    spec = importlib.util.spec_from_file_location("make_vectors", ROOT / "tools" / "make_vectors.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


def _bytes(entry: dict[str, Any]) -> bytes:
    return (VECTORS / entry["file"]).read_bytes()


def _as_json(schema: Any, value: Any) -> Any:
    return gen.to_json(schema.parsed, value, schema.parsed["__named_schemas"])


@pytest.fixture(scope="module")
def store() -> SchemaStore:
    """A consumer's store: Trialog's schemas, plus every writer schema of the manifest
    registered from its self-contained JSON (as one read from trial.started would be)."""
    store = SchemaStore.with_builtin()
    for entry in MANIFEST["vectors"]:
        if "reader_schema" not in entry:
            store.register(json.dumps(entry["schema"]))
    return store


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_fingerprint_is_that_of_the_manifest_schema(name: str) -> None:
    entry = ENTRIES[name]
    data = _bytes(entry)
    assert data[:2] == b"\xc3\x01"
    assert data[2:10].hex() == entry["fingerprint"]
    schema = SchemaStore().register(json.dumps(entry["schema"]))
    assert schema.name == entry["schema_name"]
    assert schema.fingerprint.hex() == entry["fingerprint"]
    assert schema.canonical == entry["canonical"]


@pytest.mark.parametrize("name", sorted(n for n, e in ENTRIES.items() if "reader_schema" not in e))
def test_vector_decodes_to_the_expected_value(store: SchemaStore, name: str) -> None:
    entry = ENTRIES[name]
    data = _bytes(entry)
    schema = store.writer_of(data)
    assert _as_json(schema, store.decode(data)) == entry["expected"]


@pytest.mark.parametrize("name", sorted(n for n in ENTRIES if n.startswith("event.")))
def test_event_vector_decodes_to_the_event_with_its_key_and_headers(store: SchemaStore, name: str) -> None:
    entry = ENTRIES[name]
    data = _bytes(entry)
    schema = store.writer_of(data)
    kafka = entry["kafka"]
    if entry["schema_name"] == ev.DeadLetter.SCHEMA:
        record = store.decode(data)
        letter = ev.DeadLetter(**record)
        assert _as_json(schema, letter.to_record()) == entry["expected"]
        assert dict((k, v.decode()) for k, v in letter.headers_list()) == kafka["headers"]
        return
    event = EventCodec(store).decode(data, kafka["headers"]["kind"])
    assert _as_json(schema, gen.event_record(event)) == entry["expected"]
    assert kafka["key"] == event.trial_id
    assert {k: v.decode() for k, v in event.headers()} == kafka["headers"]
    if "payload_vector" in entry:
        assert event.payload == _bytes(ENTRIES[entry["payload_vector"]])


@pytest.mark.parametrize("name", sorted(n for n, e in ENTRIES.items() if "reader_schema" in e))
def test_evolution_vector_reads_into_the_newer_schema(name: str) -> None:
    entry = ENTRIES[name]
    store = SchemaStore()
    writer = store.register(json.dumps(entry["schema"]), reader=False)
    reader = store.register(json.dumps(entry["reader_schema"]))
    assert reader.fingerprint.hex() == entry["reader_fingerprint"]
    data = _bytes(entry)
    assert store.writer_of(data) is writer
    assert _as_json(writer, writer.decode_body(data, 10)) == entry["written"]
    assert _as_json(reader, store.decode(data)) == entry["expected"]


def test_an_observation_vector_carries_a_reward_and_says_so_in_its_header(store: SchemaStore) -> None:
    """Another language's reader learns the carried reward's wire rule from the vectors: the
    observation that carries one has the header reward=1 and stands for the reward record from
    env for the tick before; one that carries none has no such header."""
    observations = [e for e in ENTRIES.values() if "kafka" in e and e["schema_name"] == ev.Observation.SCHEMA]
    carrying = [e for e in observations if e["expected"]["reward"] is not None]
    assert carrying and len(carrying) < len(observations)
    codec = EventCodec(store)
    for entry in observations:
        event = codec.decode(_bytes(entry), ev.Observation.KIND)
        headers = [(k, v.encode()) for k, v in entry["kafka"]["headers"].items()]
        check_headers(entry["kafka"]["key"].encode(), headers, event)
        if event.reward is None:
            assert "reward" not in entry["kafka"]["headers"]
            continue
        assert entry["kafka"]["headers"]["reward"] == "1" and event.tick >= 1
        reward = event.carried_reward()
        assert (reward.tick, reward.receiver, reward.value) == (event.tick - 1, event.actor, event.reward)
        assert (reward.sender, reward.confidence, reward.user_data) == ("env", 1.0, None)
        without = [(k, v) for k, v in headers if k != "reward"]
        with pytest.raises(CodecError, match="no reward header"):
            check_headers(entry["kafka"]["key"].encode(), without, event)


def test_vectors_cover_every_event_type_and_every_dtype_in_every_shape_class() -> None:
    kinds = {e["kafka"]["headers"]["kind"] for e in ENTRIES.values() if "kafka" in e}
    assert kinds == {t.KIND for t in ev.EVENT_TYPES} | {ev.DeadLetter.KIND}

    tensors: dict[str, set[str]] = {d: set() for d in SUPPORTED_DTYPES}

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            if set(node) == {"dtype", "shape", "data", "values"}:
                dims = len(node["shape"])
                tensors[node["dtype"]].add("empty" if 0 in node["shape"] else "0-d" if dims == 0 else f"{dims}-d")
            for child in node.values():
                visit(child)
        elif isinstance(node, list):
            for child in node:
                visit(child)

    visit([e["expected"] for e in ENTRIES.values()])
    for dtype, seen in tensors.items():
        assert {"0-d", "empty"} <= seen and seen - {"0-d", "empty", "1-d"}, f"{dtype}: only {seen}"


def test_committed_vectors_are_what_the_generator_writes_today(tmp_path: Path) -> None:
    gen.write(tmp_path)
    fresh = sorted(p.name for p in tmp_path.iterdir())
    committed = sorted(p.name for p in VECTORS.iterdir())
    assert fresh == committed, "run `python tools/make_vectors.py` and commit schemas/vectors/"
    for file in fresh:
        assert (tmp_path / file).read_bytes() == (VECTORS / file).read_bytes(), (
            f"{file} is stale: run `python tools/make_vectors.py` and commit schemas/vectors/"
        )
