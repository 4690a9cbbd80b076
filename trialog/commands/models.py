"""``trialog models list|show|export|import|rollback``: the versions on the ``models``
topic (:mod:`trialog.model_registry`), taken away as files and brought back."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import orjson

from trialog.commands.parts import command, json_line, run_async
from trialog.errors import TopicMissingError, TrialogError
from trialog.model_registry import (
    Catalog,
    ModelVersion,
    check_name,
    from_safetensors,
    parse_ref,
    publish_next,
    read_catalog,
)
from trialog.settings import from_args

# Kept out of an imported version's metadata: where a learner of another deployment
# resumes in its own log (partition offsets) means nothing in this one.
NOT_IMPORTED = ("counted_through",)


def add(sub) -> None:
    models = sub.add_parser(
        "models", help="List, show, export, import and roll back model versions on the models topic."
    )
    msub = models.add_subparsers(metavar="ACTION")
    listing = command(msub, "list", "Every model with its newest version; with NAME, each kept version of it.")
    listing.add_argument("name", nargs="?", metavar="NAME")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    listing.set_defaults(func=_list)
    show = command(msub, "show", "One version (NAME: the newest): its fields, metadata and tensors.")
    show.add_argument("ref", metavar="NAME[@VERSION]")
    show.add_argument("--json", action="store_true", help="as one JSON object")
    show.set_defaults(func=_show)
    export = command(
        msub, "export", "Write a version's weights (safetensors) to FILE and its config to FILE's .json sibling."
    )
    export.add_argument("ref", metavar="NAME[@VERSION]")
    export.add_argument("--out", required=True, metavar="FILE", help="e.g. cartpole-dqn.safetensors")
    export.set_defaults(func=_export)
    imported = command(
        msub,
        "import",
        "Publish a safetensors file as the newest version of NAME (its .json sibling, when there, gives the "
        "algorithm and metadata).",
    )
    imported.add_argument("file", metavar="FILE")
    imported.add_argument("--name", required=True, metavar="NAME")
    imported.add_argument("--algorithm", help="the algorithm (default: the .json sibling's)")
    imported.set_defaults(func=_import)
    rollback = command(
        msub,
        "rollback",
        "Publish an earlier version's weights and metadata again as the newest version: actor services play it "
        "at once.",
    )
    rollback.add_argument("ref", metavar="NAME@VERSION")
    rollback.set_defaults(func=_rollback)


def _with_catalog(args, work=None) -> Any:
    """Read the topic's versions, then run ``work(bus, catalog)`` on the same connection."""
    from trialog.bus import connect

    async def go():
        async with connect(from_args(args)) as bus:
            try:
                catalog = await read_catalog(bus)
            except TopicMissingError:
                raise TrialogError("no models topic: create the topics first (trialog topics create)") from None
            return await work(bus, catalog) if work else catalog

    return run_async(go())


def sidecar(file: Path) -> Path:
    """The JSON that goes with an exported safetensors file."""
    return file.with_suffix(".json")


def _when(v: ModelVersion) -> str:
    return datetime.datetime.fromtimestamp(v.created_ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _summary(v: ModelVersion) -> dict[str, Any]:
    """What a listing says of a version (no weights)."""
    meta = v.meta
    return {
        "model": v.model,
        "version": v.version,
        "algorithm": v.algorithm,
        "size": v.size,
        "sha256": v.sha256,
        "created": _when(v),
        "where": v.uri or "inline",
        **{k: meta[k] for k in ("env_steps", "rolled_back_from", "imported_from") if k in meta},
    }


def _list(args) -> int:
    catalog: Catalog = _with_catalog(args)
    if args.name:
        check_name(args.name)
        versions = catalog.versions(args.name)
        if not versions:
            raise TrialogError(
                f"no model {args.name!r} on models (models: {', '.join(sorted(catalog.latest())) or 'none'})"
            )
        rows = [_summary(versions[n]) for n in sorted(versions)]
    else:
        rows = [
            {**_summary(v), "versions": len(catalog.versions(name))} for name, v in sorted(catalog.latest().items())
        ]
    if args.json:
        for row in rows:
            print(json_line(row))
        return 0
    if not rows:
        print("no models")
    for row in rows:
        kept = f"  ({row['versions']} kept)" if "versions" in row else ""
        steps = f"  env_steps={row['env_steps']}" if "env_steps" in row else ""
        print(
            f"{row['model']}@{row['version']:<6} {row['algorithm']:8} {row['size']:>10,} B  {row['created']}  "
            f"sha256 {row['sha256'][:12]}{steps}{kept}"
        )
    return 0


def _show(args) -> int:
    v = _with_catalog(args).find(args.ref)
    tensors = {k: {"dtype": str(a.dtype), "shape": list(a.shape)} for k, a in v.tensors().items()}
    if args.json:
        print(json_line({**_summary(v), "metadata": v.meta, "tensors": tensors}))
        return 0
    for k, value in _summary(v).items():
        print(f"{k:10} {value}")
    print("metadata   " + orjson.dumps(v.meta, option=orjson.OPT_INDENT_2).decode().replace("\n", "\n           "))
    print("tensors")
    for name, t in tensors.items():
        print(f"  {name:24} {t['dtype']:8} {t['shape']}")
    return 0


def _export(args) -> int:
    out = Path(args.out)
    if sidecar(out) == out:
        raise TrialogError(f"--out {out}: the config goes to {sidecar(out)}; name the weights file otherwise")
    v = _with_catalog(args).find(args.ref)
    data = v.data()
    config = {
        "model": v.model,
        "version": v.version,
        "algorithm": v.algorithm,
        "format": v.format,
        "sha256": v.sha256,
        "created_ms": v.created_ms,
        "tensors": {k: {"dtype": str(a.dtype), "shape": list(a.shape)} for k, a in from_safetensors(data).items()},
        "metadata": v.meta,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    sidecar(out).write_bytes(orjson.dumps(config, option=orjson.OPT_INDENT_2))
    print(f"{v.model}@{v.version} ({v.algorithm}) -> {out} ({len(data):,} bytes), config {sidecar(out)}")
    return 0


def _import(args) -> int:
    file = Path(args.file)
    check_name(args.name)
    try:
        data = file.read_bytes()
        config = orjson.loads(sidecar(file).read_bytes()) if sidecar(file).exists() else {}
    except (OSError, orjson.JSONDecodeError) as exc:
        raise TrialogError(f"cannot read {file} or its config {sidecar(file)}: {exc}") from exc
    from_safetensors(data)  # refuse what actor services could not load
    algorithm = args.algorithm or config.get("algorithm")
    if not algorithm:
        raise TrialogError(f"{file}: no algorithm: give --algorithm, or the {sidecar(file).name} export writes")
    metadata = {k: v for k, v in config.get("metadata", {}).items() if k not in NOT_IMPORTED}
    metadata["imported_from"] = {"file": file.name, **{k: config[k] for k in ("model", "version") if k in config}}

    async def work(bus, catalog):
        return await publish_next(bus, catalog, args.name, algorithm, data, metadata)

    v = _with_catalog(args, work)
    print(f"{file} -> {v.model}@{v.version} ({v.algorithm}, sha256 {v.sha256[:12]})")
    return 0


def _rollback(args) -> int:
    if parse_ref(args.ref)[1] is None:
        raise TrialogError(f"rollback {args.ref}: name the version to go back to, NAME@VERSION")

    async def work(bus, catalog):
        old = catalog.find(args.ref)
        meta = {**old.meta, "rolled_back_from": old.version}
        return old, await publish_next(bus, catalog, old.model, old.algorithm, old.data(), meta)

    old, v = _with_catalog(args, work)
    print(f"{old.model}@{old.version} published again as {v.model}@{v.version}: the newest, played from now on")
    return 0
