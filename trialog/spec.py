"""The spec: one YAML file naming actor classes, implementations and trial defaults
(the seeds' ``cogment.yaml``). Every error names the file, the path inside it and
what is wrong.

.. code-block:: yaml

    name: rps                        # start requests name the spec
    actor_classes:
      player:
        observation: {type: record, name: RpsObservation, fields: [...]}   # Avro, inline
        action: schemas/rps_action.avsc                                    # or a file, relative to the spec,
                                                   # or {space: "my_pkg.spaces:MOVE"}: a Gymnasium space
        default_action: 0            # used when the actor misses its response timeout
      cook:
        observation: auto            # derived from the environment (adapters, or declared
                                     # Gymnasium spaces: trialog.adapters.declared)
        action: auto
    environments:
      rps: {entry: "trialog.examples.rps.game:RockPaperScissors", config: {target_score: 5},
            overridable: [target_score],   # config keys a start request may set (none by default)
            page: games/hands.js}          # the gateway's page module for its trials, in its --pages
                                           # folder (default: <environment>.js; docs/humans.md)
    actors:                          # actor implementations
      random: {entry: "trialog.agents.random_agent:RandomAgent"}
      counter: {entry: "trialog.examples.rps.players:CounterPlayer", classes: [player]}
      human: {client: true}          # joins from outside (a browser, a script)
      go_bot: {external: true}       # served by another process (any language, docs/protocol.md)
    trial:                           # defaults; a start request may override them
      environment: rps
      environment_config: {}
      actors:
        - {name: alice, class: player, implementation: random}
        - {name: bob, class: player, implementation: counter}
      max_ticks: 100
      seed: null                     # null: derived from the trial ID
      response_timeout_ms: 10000
      timeout_policy: default_action # or drop
      inactivity_timeout_ms: 60000
      wall_clock_limit_ms: null
      join_timeout_ms: 60000
      tick_interval_ms: null         # real time (people playing): one step every 150 ms, say;
                                     # a missing action at the deadline gets timeout_policy
      parameters: {}
      pre_trial_hooks: ["my_project.hooks:by_phase"]   # set up each trial (docs/environments.md)
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import orjson
import yaml

from trialog.errors import CodecError, SpecError
from trialog.protocol.codec import SchemaStore
from trialog.protocol.events import ActorClassSpec, ActorSpec
from trialog.protocol.spaces import as_json, default_value, space_codec

TIMEOUT_POLICIES = ("default_action", "drop")


@dataclass(frozen=True)
class ActorClass:
    """An actor class as the spec declares it: its schemas and its default action (a value).
    A resolved trial carries it as :class:`~trialog.protocol.events.ActorClassSpec` (:meth:`wire`:
    the default action as JSON text); the runtimes read that back, schemas parsed, as
    :class:`~trialog.protocol.trial.ClassSchemas`."""

    name: str
    observation_schema: str  # self-contained Avro JSON
    action_schema: str
    default_action: Any = None
    has_default_action: bool = False

    def wire(self) -> ActorClassSpec:
        """The class as ``trial.started`` carries it."""
        default = orjson.dumps(self.default_action).decode() if self.has_default_action else None
        return ActorClassSpec(self.name, self.observation_schema, self.action_schema, default)


@dataclass(frozen=True)
class Implementation:
    name: str
    entry: str = ""
    config: Mapping[str, Any] = field(default_factory=dict)
    client: bool = False
    classes: tuple[str, ...] = ()
    external: bool = False  # served by a process outside Trialog's services (another language)
    overridable: tuple[str, ...] = ()  # config keys a start request may set (I-9: nothing else)
    page: str = ""  # an environment's page module, inside the gateway's pages folder ("": <environment>.js)

    @property
    def served_here(self) -> bool:
        """Does a Trialog service (``trialog serve ...``) run this implementation?"""
        return not (self.client or self.external)


@dataclass(frozen=True)
class ActorDefault:
    """One actor of a trial as the spec (or a start request's actor list) names it: ``config``
    is the actor's own, on top of its implementation's. The three records of an actor: this one
    (what the operator wrote), :class:`~trialog.protocol.events.ActorSpec` (what ``trial.started``
    carries, made by :meth:`wire`) and :class:`~trialog.environment.ActorInfo` (what user code is
    handed, read from the record by :func:`trialog.protocol.trial.actor_info`)."""

    name: str
    actor_class: str
    implementation: str
    config: Mapping[str, Any] = field(default_factory=dict)

    def wire(self, impl: Implementation) -> ActorSpec:
        """The actor as ``trial.started`` carries it, played by ``impl`` (the spec's implementation
        named ``self.implementation``): that implementation's config with the actor's on top, as
        JSON, and whether a client plays it."""
        config = orjson.dumps({**impl.config, **self.config}).decode()
        return ActorSpec(self.name, self.actor_class, self.implementation, config, impl.client)


@dataclass(frozen=True)
class TrialDefaults:
    environment: str
    environment_config: Mapping[str, Any]
    actors: tuple[ActorDefault, ...]
    max_ticks: int | None = None
    seed: int | None = None
    response_timeout_ms: int = 10_000
    timeout_policy: str = "default_action"
    inactivity_timeout_ms: int | None = 60_000
    wall_clock_limit_ms: int | None = None
    join_timeout_ms: int = 60_000
    tick_interval_ms: int | None = None
    parameters: Mapping[str, Any] = field(default_factory=dict)
    pre_trial_hooks: tuple[str, ...] = ()


@dataclass(frozen=True)
class Spec:
    name: str
    file: str
    actor_classes: Mapping[str, ActorClass]
    environments: Mapping[str, Implementation]
    actors: Mapping[str, Implementation]
    trial: TrialDefaults

    def operator_config(self, environment: str) -> dict[str, Any]:
        """An environment's config as the operator wrote it (no start request in it)."""
        return {**self.environments[environment].config, **self.trial.environment_config}

    def seats(self, implementations: Mapping[str, str] | None = None) -> list[str]:
        """The actors of a trial of this spec that people play (client implementations),
        with ``implementations`` (actor → implementation) overriding the defaults."""
        chosen = {a.name: a.implementation for a in self.trial.actors} | dict(implementations or {})
        return [name for name, impl in chosen.items() if impl in self.actors and self.actors[impl].client]


# Where the shipped modules that specs name went when Trialog became one import package
# (the services under trialog.services; the adapters, agents and games where users import them).
_MOVED = {
    "services.environment.adapters": "trialog.adapters",
    "services.environment.views": "trialog.adapters.views",
    "services.environment.games.rps": "trialog.examples.rps.game",
    "services.actors.agents.overcooked": "trialog.examples.overcooked.cooks",
    "services.actors.agents.rps_random": "trialog.examples.rps.players",
    "services.actors.agents.scripted": "trialog.examples.rps.players",
    "services.actors.agents": "trialog.agents",
    "services": "trialog.services",
}


def _moved(module_name: str) -> str | None:
    """The new name of a module a spec names by its old one, or None if it has not moved."""
    name = module_name.removeprefix("trialog.") if module_name.startswith("trialog.services.") else module_name
    for old in sorted(_MOVED, key=len, reverse=True):
        if name == old or name.startswith(old + "."):
            new = _MOVED[old] + name[len(old) :]
            return new if new != module_name else None
    return None


def load_entry(entry: str, *, what: str = "entry") -> Any:
    """Import ``module:attribute`` (dots allowed in the attribute)."""
    module_name, sep, attr = entry.partition(":")
    if not sep or not module_name or not attr:
        raise SpecError(f"{what} {entry!r} must look like 'package.module:Name'")
    if (moved := _moved(module_name)) is not None:
        raise SpecError(f"{what} {entry!r}: that module has moved; name it '{moved}:{attr}'")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise SpecError(f"{what} {entry!r}: cannot import {module_name}: {exc}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise SpecError(f"{what} {entry!r}: {module_name} has no attribute {attr!r}") from None
    return obj


class SpecReader:
    """Checks the values of a spec's tree (read from YAML, or a start request's JSON override)
    and makes the :class:`~trialog.errors.SpecError` that names where a bad one is: ``file``
    (a path, or ``"<start request>"``) and the key path inside it."""

    def __init__(self, file: str):
        self.file = file

    def fail(self, path: str, message: str) -> SpecError:
        return SpecError(message, file=self.file, path=path)

    def mapping(self, value: Any, path: str, *, required: bool = True) -> dict[str, Any]:
        if value is None and not required:
            return {}
        if not isinstance(value, dict):
            raise self.fail(path, f"expected a mapping, got {_kind(value)}")
        return value

    def keys(self, value: dict[str, Any], path: str, allowed: set[str], required: set[str] = frozenset()) -> None:
        unknown = sorted(set(value) - allowed)
        if unknown:
            raise self.fail(
                f"{path}.{unknown[0]}" if path else unknown[0],
                f"unknown key; allowed here: {', '.join(sorted(allowed))}",
            )
        for key in sorted(required):
            if key not in value:
                raise self.fail(f"{path}.{key}" if path else key, "required key is missing")

    def string(self, value: Any, path: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(path, f"expected a non-empty string, got {_kind(value)}")
        return value

    def integer(self, value: Any, path: str, *, optional: bool = False, minimum: int = 0) -> int | None:
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"expected a whole number, got {_kind(value)}")
        if value < minimum:
            raise self.fail(path, f"must be at least {minimum}, got {value}")
        return value


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    return f"{type(value).__name__} {value!r}" if isinstance(value, str | int | float | bool) else type(value).__name__


def load_spec(path: str | Path, store: SchemaStore | None = None) -> Spec:
    """Load and validate a spec file; schemas are registered in ``store``."""
    path = Path(path)
    file = str(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise SpecError(f"cannot read: {exc.strerror}", file=file) from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else None
        raise SpecError(f"not valid YAML: {getattr(exc, 'problem', exc)}", file=file, path=where) from exc
    return parse_spec(raw, file=file, base_dir=path.parent, store=store)


def parse_spec(
    raw: Any, *, file: str = "<spec>", base_dir: Path | None = None, store: SchemaStore | None = None
) -> Spec:
    store = store or SchemaStore.with_builtin()
    r = SpecReader(file)
    top = r.mapping(raw, "(top level)")
    r.keys(
        top,
        "",
        {"name", "actor_classes", "environments", "actors", "trial"},
        {"name", "actor_classes", "environments", "actors", "trial"},
    )
    name = r.string(top["name"], "name")

    environments = {
        key: _implementation(r, key, value, f"environments.{key}", allow_client=False)
        for key, value in r.mapping(top["environments"], "environments").items()
    }
    if not environments:
        raise r.fail("environments", "declare at least one environment implementation")
    actors = {
        key: _implementation(r, key, value, f"actors.{key}", allow_client=True)
        for key, value in r.mapping(top["actors"], "actors").items()
    }
    if not actors:
        raise r.fail("actors", "declare at least one actor implementation")

    trial = _trial_defaults(r, r.mapping(top["trial"], "trial"), environments, actors)
    classes_raw = r.mapping(top["actor_classes"], "actor_classes")
    if not classes_raw:
        raise r.fail("actor_classes", "declare at least one actor class")
    env_impl = environments[trial.environment]
    actor_classes = {
        key: _actor_class(
            r, key, value, f"actor_classes.{key}", base_dir, store, env_impl, trial.environment_config, spec_name=name
        )
        for key, value in classes_raw.items()
    }
    for i, actor in enumerate(trial.actors):
        if actor.actor_class not in actor_classes:
            raise r.fail(
                f"trial.actors[{i}].class",
                f"unknown actor class {actor.actor_class!r}; declared: {', '.join(actor_classes)}",
            )
        impl = actors[actor.implementation]
        if impl.classes and actor.actor_class not in impl.classes:
            raise r.fail(
                f"trial.actors[{i}].implementation",
                f"{actor.implementation!r} does not play class {actor.actor_class!r}",
            )
    return Spec(name, file, actor_classes, environments, actors, trial)


def _implementation(r: SpecReader, name: str, value: Any, path: str, *, allow_client: bool) -> Implementation:
    v = r.mapping(value, path)
    allowed = {"entry", "config", "classes", "external", "overridable"} | ({"client"} if allow_client else {"page"})
    r.keys(v, path, allowed)
    client = _flag(r, v, "client", path)
    external = _flag(r, v, "external", path)
    if external and client:
        raise r.fail(
            f"{path}.external",
            "an implementation is either a client (joins a seat) or external (a service of its own), not both",
        )
    if external and "entry" in v:
        raise r.fail(
            f"{path}.entry", "an external implementation has no entry: its own process serves it (see docs/protocol.md)"
        )
    if not (client or external) and "entry" not in v:
        raise r.fail(
            f"{path}.entry",
            "required key is missing (an import path like 'package.module:Name', "
            "or 'external: true' for a service in another process)",
        )
    entry = r.string(v["entry"], f"{path}.entry") if "entry" in v else ""
    if entry and ":" not in entry:
        raise r.fail(f"{path}.entry", f"{entry!r} must look like 'package.module:Name'")
    classes = v.get("classes") or []
    if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
        raise r.fail(f"{path}.classes", "expected a list of actor class names")
    overridable = v.get("overridable") or []
    if not isinstance(overridable, list) or not all(isinstance(k, str) for k in overridable):
        raise r.fail(f"{path}.overridable", "expected a list of config keys a start request may set")
    config = r.mapping(v.get("config"), f"{path}.config", required=False)
    page = _page(r, v["page"], f"{path}.page") if "page" in v else ""
    return Implementation(name, entry, config, client, tuple(classes), external, tuple(overridable), page)


def _page(r: SpecReader, value: Any, path: str) -> str:
    """An environment's page module: a ``.js`` file named by a path relative to the gateway's
    pages folder (``tug.js``, ``games/tug.js``), never one that could lead out of it."""
    page = r.string(value, path)
    parts = PurePosixPath(page).parts
    if "\\" in page or page.startswith("/") or ".." in parts or ":" in page or not parts:
        raise r.fail(
            path,
            f"{page!r}: name a page module by its path inside the gateway's pages folder "
            "(like tug.js or games/tug.js): no '..', no absolute path, no drive, no backslash",
        )
    if not page.endswith(".js"):
        raise r.fail(path, f"{page!r}: a page module is a JavaScript file ending in .js")
    return str(PurePosixPath(*parts))


def _flag(r: SpecReader, v: dict[str, Any], key: str, path: str) -> bool:
    value = v.get(key, False)
    if not isinstance(value, bool):
        raise r.fail(f"{path}.{key}", f"expected true or false, got {_kind(value)}")
    return value


def _trial_defaults(r: SpecReader, v: dict[str, Any], environments, actors) -> TrialDefaults:
    allowed = {
        "environment",
        "environment_config",
        "actors",
        "max_ticks",
        "seed",
        "response_timeout_ms",
        "timeout_policy",
        "inactivity_timeout_ms",
        "wall_clock_limit_ms",
        "join_timeout_ms",
        "tick_interval_ms",
        "parameters",
        "pre_trial_hooks",
    }
    r.keys(v, "trial", allowed, {"environment", "actors"})
    env = r.string(v["environment"], "trial.environment")
    if env not in environments:
        raise r.fail(
            "trial.environment", f"unknown environment implementation {env!r}; declared: {', '.join(environments)}"
        )
    actor_list = parse_actor_list(r, v["actors"], "trial.actors", actors)
    policy = v.get("timeout_policy", "default_action")
    if policy not in TIMEOUT_POLICIES:
        raise r.fail("trial.timeout_policy", f"{policy!r} is not one of {', '.join(TIMEOUT_POLICIES)}")
    hooks = v.get("pre_trial_hooks") or []
    if not isinstance(hooks, list) or not all(isinstance(h, str) and ":" in h for h in hooks):
        raise r.fail("trial.pre_trial_hooks", "expected a list of import paths like 'package.module:function'")
    return TrialDefaults(
        environment=env,
        environment_config=r.mapping(v.get("environment_config"), "trial.environment_config", required=False),
        actors=actor_list,
        max_ticks=r.integer(v.get("max_ticks"), "trial.max_ticks", optional=True, minimum=1),
        seed=r.integer(v.get("seed"), "trial.seed", optional=True),
        response_timeout_ms=r.integer(v.get("response_timeout_ms", 10_000), "trial.response_timeout_ms", minimum=1),
        timeout_policy=policy,
        inactivity_timeout_ms=r.integer(
            v.get("inactivity_timeout_ms", 60_000), "trial.inactivity_timeout_ms", optional=True, minimum=1
        ),
        wall_clock_limit_ms=r.integer(
            v.get("wall_clock_limit_ms"), "trial.wall_clock_limit_ms", optional=True, minimum=1
        ),
        join_timeout_ms=r.integer(v.get("join_timeout_ms", 60_000), "trial.join_timeout_ms", minimum=1),
        tick_interval_ms=r.integer(v.get("tick_interval_ms"), "trial.tick_interval_ms", optional=True, minimum=1),
        parameters=r.mapping(v.get("parameters"), "trial.parameters", required=False),
        pre_trial_hooks=tuple(hooks),
    )


def parse_actor_list(
    r: SpecReader | None, value: Any, path: str, actors: Mapping[str, Implementation]
) -> tuple[ActorDefault, ...]:
    """Validate a list of trial actors (from the spec or a start request's override)."""
    r = r or SpecReader("<start request>")
    if not isinstance(value, list) or not value:
        raise r.fail(path, "expected a non-empty list of actors")
    out = []
    seen: set[str] = set()
    for i, item in enumerate(value):
        p = f"{path}[{i}]"
        a = r.mapping(item, p)
        r.keys(a, p, {"name", "class", "implementation", "config"}, {"name", "class", "implementation"})
        name = r.string(a["name"], f"{p}.name")
        if name in seen:
            raise r.fail(f"{p}.name", f"actor name {name!r} is used twice")
        if name in ("env", "*") or "," in name or name.endswith(".*"):
            raise r.fail(f"{p}.name", f"{name!r} is reserved or contains ','")
        seen.add(name)
        impl = r.string(a["implementation"], f"{p}.implementation")
        if impl not in actors:
            raise r.fail(f"{p}.implementation", f"unknown actor implementation {impl!r}; declared: {', '.join(actors)}")
        out.append(
            ActorDefault(
                name,
                r.string(a["class"], f"{p}.class"),
                impl,
                r.mapping(a.get("config"), f"{p}.config", required=False),
            )
        )
    return tuple(out)


def _actor_class(
    r, name, value, path, base_dir, store, env_impl: Implementation, env_config, *, spec_name: str
) -> ActorClass:
    v = r.mapping(value, path)
    r.keys(v, path, {"observation", "action", "default_action"}, {"observation", "action"})
    described: Mapping[str, Any] | None = None
    schemas = {}
    for part in ("observation", "action"):
        raw = v[part]
        if _names_a_space(raw):
            raw, space_default = _declared_space(r, f"{path}.{part}", raw["space"], spec_name, name, part)
            if part == "action":
                described = {**(described or {}), "default_action": space_default}
        elif raw == "auto":
            if described is None:
                described = _describe(r, f"{path}.{part}", env_impl, env_config, name)
            raw = described.get(part)
        elif isinstance(raw, str) and raw.endswith(".avsc"):
            file = (base_dir or Path(".")) / raw
            try:
                raw = json.loads(file.read_text())
            except (OSError, json.JSONDecodeError) as exc:
                raise r.fail(f"{path}.{part}", f"cannot read schema file {file}: {exc}") from exc
        try:
            schemas[part] = store.register(raw).json
        except CodecError as exc:
            raise r.fail(f"{path}.{part}", str(exc)) from exc
    has_default = "default_action" in v
    default = v.get("default_action")
    if not has_default and (v["action"] == "auto" or _names_a_space(v["action"])):
        # Declared spaces (the environment's: trialog.adapters.declared; or the class's own
        # {space: ...}) give a default action; the spec's own default_action wins.
        if described and "default_action" in described:
            default, has_default = described["default_action"], True
    if has_default:
        try:
            store.register(schemas["action"]).encode(default)
        except CodecError as exc:
            raise r.fail(f"{path}.default_action", f"does not match the action schema: {exc}") from exc
    return ActorClass(name, schemas["observation"], schemas["action"], default, has_default)


def _describe(r: SpecReader, path: str, impl: Implementation, env_config, actor_class: str) -> Mapping[str, Any]:
    if impl.external:
        raise r.fail(
            path, f"'auto' needs the environment's code, but {impl.name!r} is external: write the schema in the spec"
        )
    try:
        cls = load_entry(impl.entry, what=f"environment {impl.name}")
    except SpecError as exc:
        raise r.fail(path, f"'auto' needs the environment to describe its spaces: {exc}") from exc
    describe = getattr(cls, "describe", None)
    if describe is None:
        raise r.fail(path, f"'auto' needs {impl.entry} to have a describe(config, actor_class) classmethod")
    config = {**impl.config, **env_config}
    try:
        return describe(config, actor_class)
    except Exception as exc:  # the user's code: report whatever it raised
        raise r.fail(path, f"{impl.entry}.describe failed: {type(exc).__name__}: {exc}") from exc


def _names_a_space(raw: Any) -> bool:
    return isinstance(raw, dict) and set(raw) == {"space"}


def _declared_space(r: SpecReader, path: str, entry: Any, spec_name: str, actor_class: str, part: str) -> tuple:
    """``{space: module:NAME}``: a Gymnasium space (or a function returning one) as the class's
    Avro schema, with its default value as JSON (:func:`trialog.protocol.spaces.default_value`)."""
    if not isinstance(entry, str):
        raise r.fail(
            f"{path}.space", f"expected an import path 'package.module:NAME' of a Gymnasium space, got {entry!r}"
        )
    space = load_entry(entry, what=f"{path}.space")
    try:
        space = space() if callable(space) else space
        codec = space_codec(space, namespace=f"trialog.spec.{spec_name}.{actor_class}", name=part.title(), where=entry)
        return codec.schema, as_json(codec.to_payload(default_value(codec.space)))
    except Exception as exc:  # the user's function, or Gymnasium missing: say which and why
        raise r.fail(
            f"{path}.space", str(exc) if isinstance(exc, SpecError) else f"{type(exc).__name__}: {exc}"
        ) from exc
