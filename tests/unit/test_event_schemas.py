"""The event classes of trialog/protocol/events.py mirror schemas/*.avsc by hand: the same
fields in the same order, None allowed exactly where the schema has a union with null, each
class naming its schema by the full name the codec looks it up by. A field added on one side
only fails here, not in a service reading the other side's records."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any

import pytest

from trialog.protocol import event_codec
from trialog.protocol import events as ev
from trialog.protocol.codec import SchemaStore, schemas_dir

NOT_EVENTS = {"trialog.Tensor", "trialog.ModelVersion"}  # schemas of other records (arrays, model versions)


def _full_name(schema: dict[str, Any], namespace: str = "") -> str:
    name = schema["name"]
    namespace = schema.get("namespace", namespace)
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _schema_files() -> dict[str, dict[str, Any]]:
    """The current schemas (not schemas/previous), by full name."""
    files: dict[str, dict[str, Any]] = {}
    for path in sorted(schemas_dir().glob("*.avsc")):
        schema = json.loads(path.read_text(encoding="utf-8"))
        name = _full_name(schema)
        assert name not in files, f"{path.name}: {name} is defined by another file too"
        files[name] = schema
    return files


SCHEMAS = _schema_files()
EVENT_CLASSES = (*ev.EVENT_TYPES, ev.DeadLetter)


def _nested() -> list[tuple[type, str]]:
    """The records nested in events, as the codec maps them (a field of arrays of a record):
    (class, full name of the record in the parent's schema)."""
    out = []
    for cls in ev.EVENT_TYPES:
        nested = event_codec._LAYOUTS[cls].nested
        parent = SCHEMAS[cls.SCHEMA]
        for field in parent["fields"]:
            if field["name"] in nested:
                items = field["type"]["items"]
                out.append((nested[field["name"]], items if isinstance(items, str) else _full_name(items, "trialog")))
    return list(dict.fromkeys(out))


NESTED = _nested()


def _nullable(avro_type: Any) -> bool:
    return isinstance(avro_type, list) and "null" in avro_type


def _allows_none(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint)


def _check(cls: type, schema: dict[str, Any]) -> None:
    fields = dataclasses.fields(cls)
    ours = [f.name for f in fields]
    theirs = [f["name"] for f in schema["fields"]]
    assert ours == theirs, f"{cls.__name__} has fields {ours}; its schema {_full_name(schema)} has {theirs}"
    hints = typing.get_type_hints(cls)
    by_name = {f["name"]: f for f in schema["fields"]}
    for f in fields:
        nullable = _nullable(by_name[f.name]["type"])
        assert _allows_none(hints[f.name]) == nullable, (
            f"{cls.__name__}.{f.name} is {hints[f.name]}; the schema says {by_name[f.name]['type']}: "
            "None where (and only where) the schema has a union with null"
        )
        if nullable and by_name[f.name].get("default", "") is None and f.default is not dataclasses.MISSING:
            assert f.default is None, f"{cls.__name__}.{f.name}: the schema's default is null, not {f.default!r}"


@pytest.mark.parametrize("cls", EVENT_CLASSES, ids=lambda c: c.__name__)
def test_each_event_class_mirrors_its_schema(cls):
    assert cls.SCHEMA in SCHEMAS, f"{cls.__name__}.SCHEMA is {cls.SCHEMA!r}; no file of schemas/ defines it"
    _check(cls, SCHEMAS[cls.SCHEMA])


@pytest.mark.parametrize("cls, name", NESTED, ids=lambda x: getattr(x, "__name__", x))
def test_each_nested_record_mirrors_its_schema(cls, name):
    assert name in SCHEMAS, f"{name}, the items of a field holding {cls.__name__}, is defined by no file of schemas/"
    _check(cls, SCHEMAS[name])


def test_the_codec_finds_each_class_schema_by_its_name():
    store = SchemaStore.with_builtin()
    for cls in EVENT_CLASSES:
        assert store.get(cls.SCHEMA).name == cls.SCHEMA


def test_every_record_schema_has_its_class():
    mirrored = {cls.SCHEMA for cls in EVENT_CLASSES} | {name for _, name in NESTED}
    assert set(SCHEMAS) - NOT_EVENTS == mirrored, (
        f"schemas with no class: {sorted(set(SCHEMAS) - NOT_EVENTS - mirrored)}; "
        f"classes with no schema: {sorted(mirrored - set(SCHEMAS))}"
    )


def test_the_check_catches_a_field_on_one_side_only():
    """The check itself: a field the class has and the schema lacks, or the other way round, fails."""
    schema = SCHEMAS[ev.View.SCHEMA]
    _check(ev.View, schema)
    extra = {**schema, "fields": [*schema["fields"], {"name": "extra", "type": "string", "default": ""}]}
    with pytest.raises(AssertionError, match="extra"):
        _check(ev.View, extra)
    fewer = {**schema, "fields": schema["fields"][:-1]}
    with pytest.raises(AssertionError, match="view"):
        _check(ev.View, fewer)
    optional = {**schema, "fields": [*schema["fields"][:-1], {**schema["fields"][-1], "type": ["null", "string"]}]}
    with pytest.raises(AssertionError, match="union with null"):
        _check(ev.View, optional)
