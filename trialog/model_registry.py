"""The model registry: versions of learned models on the compacted ``models`` topic.

A learner publishes a :class:`ModelVersion` per update: the weights as
`safetensors <https://huggingface.co/docs/safetensors>`_ bytes (a flat dict of
named arrays, readable from any language), inline in the record when small, or
written to the deployment's model store (the ``model_store`` setting, a folder
every learner and actor service sees, e.g. a shared volume) and named by ``uri``
when large. Either way the record carries their SHA-256, and readers check it.

The topic is compacted and each version is its own key, ``NAME@VERSION``, so
compaction keeps every version: the registry lists them, exports any, rolls back to
one, and a trial can pin one (a policy's ``model: NAME@VERSION``). Publishing a
version deletes (a tombstone for its key) the one ``model_versions_kept`` versions
older, which bounds what every reader reads at start. A reader that starts (an actor
service, a restarted learner) reads the topic from the beginning and knows every
model's newest version at once. Records keyed by the bare model name, as versions
were before, read the same: readers go by the value's ``model`` and ``version``.

.. code-block:: python

    await publish(bus, make_version("cartpole", 3, "dqn", {"q/w0": w0, ...}, metadata))
    follower = ModelFollower(bus, on_version=print)   # actor services: newest version, live
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from trialog.errors import CodecError, TrialogError
from trialog.protocol.topics import MODELS
from trialog.telemetry.logs import get_logger

log = get_logger(__name__)

SCHEMA = "trialog.ModelVersion"
# Weights above this size go to the model store: Kafka's default record limit is 1 MB.
INLINE_LIMIT = 512 * 1024
SEPARATOR = "@"  # NAME@VERSION: a version's key on the topic, and how commands and specs name one


def parse_ref(ref: str) -> tuple[str, int | None]:
    """``NAME`` or ``NAME@VERSION`` as (name, version or None: the newest)."""
    name, sep, number = ref.partition(SEPARATOR)
    check_name(name)
    if not sep:
        return name, None
    if not number.isdigit() or int(number) < 1:
        raise TrialogError(f"model {ref!r}: the version after {SEPARATOR!r} must be a number from 1")
    return name, int(number)


def check_name(model: str) -> None:
    if not model or SEPARATOR in model:
        raise TrialogError(f"model name {model!r}: must be non-empty, without {SEPARATOR!r} (it separates the version)")


def key_of(model: str, version: int) -> bytes:
    return f"{model}{SEPARATOR}{version}".encode()


@dataclass(frozen=True, slots=True)
class ModelVersion:
    """One published version of a model (the value of a ``models`` record)."""

    model: str
    version: int
    algorithm: str
    sha256: str
    size: int
    weights: bytes | None = None
    uri: str | None = None
    format: str = "safetensors"
    metadata: str = "{}"
    created_ms: int = 0

    @property
    def meta(self) -> dict[str, Any]:
        return orjson.loads(self.metadata) if self.metadata else {}

    def tensors(self) -> dict[str, np.ndarray]:
        """The weights as NumPy arrays, read inline or from the store and checked."""
        return from_safetensors(self.data())

    def data(self) -> bytes:
        """The weights' safetensors bytes, read inline or from the store and checked."""
        data = self.weights
        if data is None:
            if not self.uri:
                raise TrialogError(f"model {self.model} v{self.version} has neither inline weights nor a uri")
            path = Path(self.uri.removeprefix("file://"))
            try:
                data = path.read_bytes()
            except OSError as exc:
                raise TrialogError(f"model {self.model} v{self.version}: cannot read weights at {path}: {exc.strerror} "
                                   "(is the model_store folder shared with this service?)") from exc  # fmt: skip
        if hashlib.sha256(data).hexdigest() != self.sha256:
            raise TrialogError(
                f"model {self.model} v{self.version}: weights do not match their SHA-256 (corrupt or replaced)"
            )
        return data


def _safetensors():
    try:
        import safetensors.numpy
    except ImportError:
        raise TrialogError("model weights need safetensors: pip install 'trialog[learn]'") from None
    return safetensors.numpy


def to_safetensors(tensors: Mapping[str, Any]) -> bytes:
    save = _safetensors().save

    return save({k: np.ascontiguousarray(np.asarray(v)) for k, v in tensors.items()})


def from_safetensors(data: bytes) -> dict[str, np.ndarray]:
    load = _safetensors().load

    try:
        return load(data)
    except Exception as exc:  # the library raises its own error types
        raise CodecError(f"model weights are not valid safetensors: {exc}") from exc


def make_version(
    model: str, version: int, algorithm: str, tensors: Mapping[str, Any], metadata: Mapping[str, Any], *,
    store: str = "", inline_limit: int = INLINE_LIMIT,
) -> ModelVersion:  # fmt: skip
    """Serialize weights; inline when small enough, else into ``store`` (a folder)."""
    return version_of_bytes(model, version, algorithm, to_safetensors(tensors), metadata, store=store,
                            inline_limit=inline_limit)  # fmt: skip


def version_of_bytes(
    model: str, version: int, algorithm: str, data: bytes, metadata: Mapping[str, Any], *,
    store: str = "", inline_limit: int = INLINE_LIMIT,
) -> ModelVersion:  # fmt: skip
    """A version of safetensors bytes as they are (a file imported, a version republished)."""
    check_name(model)
    digest = hashlib.sha256(data).hexdigest()
    common = dict(
        model=model,
        version=version,
        algorithm=algorithm,
        sha256=digest,
        size=len(data),
        metadata=orjson.dumps(metadata, option=orjson.OPT_SERIALIZE_NUMPY).decode(),
        created_ms=int(time.time() * 1000),
    )
    if len(data) <= inline_limit:
        return ModelVersion(weights=data, **common)
    if not store:
        raise TrialogError(
            f"model {model}: {len(data)} bytes of weights are too large to travel inline ({inline_limit}); "
            "set model_store (TRIALOG_MODEL_STORE) to a folder shared by learners and actor services"
        )
    path = Path(store) / model / f"{version:08d}-{digest[:12]}.safetensors"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)  # whole or absent: a reader never sees half a file
    return ModelVersion(uri=path.resolve().as_uri(), **common)


def encode(bus, version: ModelVersion) -> bytes:
    return bus.store.encode(SCHEMA, dataclasses.asdict(version))


def decode(bus, value: bytes) -> ModelVersion:
    record = bus.store.decode(value, SCHEMA)
    try:
        return ModelVersion(**record)
    except TypeError as exc:
        raise CodecError(f"models record does not fit ModelVersion: {exc}") from exc


async def publish(bus, version: ModelVersion, *, keep: int | None = None) -> None:
    """Send one version to ``models``, keyed ``NAME@VERSION``, with a tombstone for the
    version ``keep`` older (default: the ``model_versions_kept`` setting; 0 keeps all);
    wait for the acknowledgement. Versions numbered one by one (as learners, imports and
    rollbacks number them) thus leave the topic as newer ones come."""
    check_name(version.model)
    keep = bus.settings.model_versions_kept if keep is None else keep
    items = [(MODELS, key_of(version.model, version.version), encode(bus, version), [("schema", SCHEMA.encode())])]
    if keep > 0 and version.version - keep >= 1:
        items.append((MODELS, key_of(version.model, version.version - keep), None, []))
    await bus.send_many(items)


def readable(bus, value: bytes | None) -> ModelVersion | None:
    """A record's version; None for a tombstone or (logged) a value that is not one."""
    if not value:
        return None
    try:
        return decode(bus, value)
    except CodecError as exc:
        log.warning("unreadable record on models skipped", error=str(exc))
        return None


class Catalog:
    """The topic folded as compaction would leave it: each key's last value, tombstones
    deleting theirs. Every version of every model, with the key it is under."""

    def __init__(self) -> None:
        self.by_key: dict[bytes, ModelVersion] = {}

    def add(self, bus, key: bytes | None, value: bytes | None) -> ModelVersion | None:
        """Fold one record; the version it adds (None: a tombstone, or unreadable)."""
        if not value:
            self.by_key.pop(key, None)
            return None
        v = readable(bus, value)
        if v is not None:
            self.by_key[key] = v
        return v

    def versions(self, model: str) -> dict[int, ModelVersion]:
        """A model's versions by number."""
        return {v.version: v for v in self.by_key.values() if v.model == model}

    def latest(self) -> dict[str, ModelVersion]:
        newest: dict[str, ModelVersion] = {}
        for v in self.by_key.values():
            if v.model not in newest or v.version > newest[v.model].version:
                newest[v.model] = v
        return newest

    def find(self, ref: str) -> ModelVersion:
        """The version ``NAME@VERSION`` names, or the newest of ``NAME``; else an error saying what there is."""
        model, number = parse_ref(ref)
        versions = self.versions(model)
        if not versions:
            known = ", ".join(sorted(self.latest())) or "none"
            raise TrialogError(f"no model {model!r} on models (models: {known})")
        if number is None:
            return versions[max(versions)]
        if number not in versions:
            raise TrialogError(f"model {model} has no version {number} (kept: {_ranges(sorted(versions))})")
        return versions[number]

    def expired(self, model: str, keep: int) -> list[bytes]:
        """The keys of the model's versions older than its newest ``keep`` (0: none)."""
        if keep <= 0:
            return []
        kept = sorted({v.version for v in self.by_key.values() if v.model == model})[-keep:]
        return [k for k, v in self.by_key.items() if v.model == model and v.version < kept[0]] if kept else []


def _ranges(numbers: list[int]) -> str:
    """1, 2, 3, 5 as "1-3, 5"."""
    spans: list[list[int]] = []
    for n in numbers:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


async def read_catalog(bus) -> Catalog:
    """Every version on the topic (read from the beginning to its end)."""
    catalog = Catalog()
    async for record in bus.read_to_end(MODELS):
        catalog.add(bus, record.key, record.value)
    return catalog


async def latest_versions(bus) -> dict[str, ModelVersion]:
    """The newest version of every model on the topic (read from the beginning to its end)."""
    return (await read_catalog(bus)).latest()


async def prune(bus, catalog: Catalog, model: str, keep: int | None = None) -> int:
    """Tombstones for every version of ``model`` beyond the newest ``keep`` (default: the
    setting) in ``catalog``, whatever their numbering or keying; how many."""
    keys = catalog.expired(model, bus.settings.model_versions_kept if keep is None else keep)
    if keys:
        await bus.send_many([(MODELS, key, None, []) for key in keys])
    for key in keys:
        del catalog.by_key[key]
    return len(keys)


async def publish_next(
    bus, catalog: Catalog, model: str, algorithm: str, data: bytes, metadata: Mapping[str, Any]
) -> ModelVersion:
    """Publish safetensors bytes as the model's newest version (its newest number plus one,
    or 1) — an imported file, an old version rolled back to — and drop what is then
    beyond ``model_versions_kept``."""
    versions = catalog.versions(model)
    v = await asyncio.to_thread(
        version_of_bytes, model, max(versions, default=0) + 1, algorithm, data, metadata,
        store=bus.settings.model_store,
    )  # fmt: skip
    await publish(bus, v, keep=0)  # the prune below drops every version beyond what is kept
    catalog.by_key[key_of(v.model, v.version)] = v
    await prune(bus, catalog, model)
    return v


class ModelFollower:
    """Follows ``models`` from its beginning and calls ``on_version`` (in the event loop;
    keep it short) with each model's newest version — or, for a model pinned in ``pins``
    (name -> version; None: the newest), with that version only. What the topic holds when it starts is
    read to its end first, so a starting reader gets one call per model, not one per
    version kept; then each newer version as it comes."""

    def __init__(self, bus, on_version: Callable[[ModelVersion], None], pins: Mapping[str, int | None] | None = None):
        self.bus = bus
        self.on_version = on_version
        self.pins = dict(pins or {})
        self.latest: dict[str, ModelVersion] = {}  # per model, the version reported (or to report)
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def wanted(self, v: ModelVersion) -> bool:
        """Whether ``v`` replaces what is held of its model."""
        held = self.latest.get(v.model)
        pin = self.pins.get(v.model)
        if pin is not None:
            return v.version == pin and held is None
        return held is None or v.version > held.version

    async def _run(self) -> None:
        # Not batched: a fetch answered as soon as a version is there, not after the batched wait
        # (on-policy learners collect by version: every moment acting with the old one is late data).
        consumer = self.bus.consumer([MODELS])
        await consumer.start()
        try:
            ends = await consumer.end_offsets(consumer.assignment())
            waiting: set[str] | None = set()  # models to report once caught up (None: caught up)
            while True:
                for record in await consumer.poll(timeout_ms=500):
                    v = readable(self.bus, record.value)
                    if v is None or not self.wanted(v):
                        continue
                    self.latest[v.model] = v
                    if waiting is None:
                        self._report(v)
                    else:
                        waiting.add(v.model)
                if waiting is not None and all((consumer.position_hint(*rp) or 0) >= end for rp, end in ends.items()):
                    for model in sorted(waiting):
                        self._report(self.latest[model])
                    self._say_missing_pins()
                    waiting = None
        finally:
            await consumer.stop()

    def _report(self, v: ModelVersion) -> None:
        try:
            self.on_version(v)
        except Exception:
            log.exception("model version handler failed", model=v.model, version=v.version)

    def _say_missing_pins(self) -> None:
        for model, version in self.pins.items():
            if version is not None and model not in self.latest:
                log.warning("pinned model version not on models: acting without it until it is published",
                            model=model, version=version)  # fmt: skip
