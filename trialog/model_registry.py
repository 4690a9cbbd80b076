"""The model registry: versions of learned models on the compacted ``models`` topic.

A learner publishes a :class:`ModelVersion` per update: the weights as
`safetensors <https://huggingface.co/docs/safetensors>`_ bytes (a flat dict of
named arrays, readable from any language), inline in the record when small, or
written to the deployment's model store (the ``model_store`` setting, a folder
every learner and actor service sees, e.g. a shared volume) and named by ``uri``
when large. Either way the record carries their SHA-256, and readers check it.

The topic is compacted and keyed by model name, so it holds the newest version of
each model: a reader that starts (an actor service, a restarted learner) reads it
from the beginning and knows every model's latest version at once.

.. code-block:: python

    await publish(bus, ModelVersion.of("cartpole", 3, "dqn", {"q/w0": w0, ...}), inline_limit=...)
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
        return from_safetensors(data)


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
    data = to_safetensors(tensors)
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


async def publish(bus, version: ModelVersion) -> None:
    """Send one version to ``models``, keyed by the model's name; wait for the acknowledgement."""
    await bus.send_many([(MODELS, version.model.encode(), encode(bus, version), [("schema", SCHEMA.encode())])])


async def latest_versions(bus) -> dict[str, ModelVersion]:
    """The newest version of every model on the topic (read from the beginning to its end)."""
    consumer = bus.consumer([MODELS])
    await consumer.start()
    try:
        ends = await consumer.end_offsets(consumer.assignment())
        latest: dict[str, ModelVersion] = {}
        positions = {rp: 0 for rp in ends}
        while any(positions[rp] < end for rp, end in ends.items()):
            for record in await consumer.poll(timeout_ms=500):
                positions[(record.role, record.partition)] = record.next_offset
                _keep_newest(bus, latest, record.value)
            for rp in ends:
                positions[rp] = max(positions[rp], consumer.position_hint(*rp) or 0)
        return latest
    finally:
        await consumer.stop()


def _keep_newest(bus, latest: dict[str, ModelVersion], value: bytes | None) -> ModelVersion | None:
    if not value:
        return None
    try:
        v = decode(bus, value)
    except CodecError as exc:
        log.warning("unreadable record on models skipped", error=str(exc))
        return None
    current = latest.get(v.model)
    if current is not None and current.version >= v.version:
        return None
    latest[v.model] = v
    return v


class ModelFollower:
    """Follows ``models`` from its beginning and calls ``on_version`` for every version
    newer than the last one seen of its model (in the event loop; keep it short)."""

    def __init__(self, bus, on_version: Callable[[ModelVersion], None]):
        self.bus = bus
        self.on_version = on_version
        self.latest: dict[str, ModelVersion] = {}
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        consumer = self.bus.consumer([MODELS], batched=True)
        await consumer.start()
        try:
            while True:
                for record in await consumer.poll(timeout_ms=500):
                    newer = _keep_newest(self.bus, self.latest, record.value)
                    if newer is not None:
                        try:
                            self.on_version(newer)
                        except Exception:
                            log.exception("model version handler failed", model=newer.model, version=newer.version)
        finally:
            await consumer.stop()
