"""Your own environment, its spaces declared with Gymnasium spaces: no Avro written by hand.

Subclass :class:`SpacesEnvironment` instead of :class:`~trialog.environment.Environment` and
say, per actor class, what its actors observe and do::

    class GuessTheNumber(SpacesEnvironment):
        observation_spaces = {"guesser": spaces.Dict({"hint": spaces.Discrete(3), ...})}
        action_spaces = {"guesser": spaces.Discrete(100, start=1)}

A spec that says ``observation: auto`` and ``action: auto`` for the class then gets, from
:meth:`SpacesEnvironment.describe`, what the PettingZoo and Gymnasium adapters give for their
spaces (the same mapping, :mod:`trialog.adapters.spaces`): the Avro schemas, the space
description (``trialog.space``) that random actors sample from, and a default action (the
value of the space nearest to zero, see :func:`~trialog.adapters.spaces.default_value`) unless
the spec sets ``default_action``.

``start`` and ``update`` deal in Gymnasium values, as a Gymnasium env does: ``update`` gets each
action as a member of its action space (a tuple for a Tuple space, a dict by the original keys
for a Dict), and ``start`` and ``update`` return observations that must be members of their
observation spaces. The class converts both ways and checks membership: an observation outside
its space fails the trial naming the actor and the space; an action outside its space is refused
with reason ``invalid_action``. An override of ``update_batch`` gets the actions as they cross
the log; convert them with :meth:`SpacesEnvironment.native_actions`.

Spaces that depend on the environment's config: override the classmethod
:meth:`SpacesEnvironment.spaces_for`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from gymnasium import spaces

from trialog.adapters.spaces import SpaceCodec, as_json, default_value, space_codec
from trialog.environment import Environment, Step
from trialog.errors import SpecError, TrialError


class SpacesEnvironment(Environment):
    """An environment whose actor classes' spaces are Gymnasium spaces (module docstring)."""

    observation_spaces: ClassVar[Mapping[str, spaces.Space]] = {}
    action_spaces: ClassVar[Mapping[str, spaces.Space]] = {}
    # Names the Avro records (trialog.env.<space_name>.<actor class>.Observation); default: the class's name.
    space_name: ClassVar[str | None] = None

    @classmethod
    def spaces_for(cls, config: Mapping[str, Any], actor_class: str) -> tuple[spaces.Space, spaces.Space]:
        """The observation and action spaces of ``actor_class``; by default from the class
        attributes, whatever the config."""
        declared = sorted(set(cls.observation_spaces) | set(cls.action_spaces))
        missing = [
            name
            for name, table in (("observation_spaces", cls.observation_spaces), ("action_spaces", cls.action_spaces))
            if actor_class not in table
        ]
        if missing:
            raise SpecError(
                f"{cls.__name__} declares no space for actor class {actor_class!r} in {' and '.join(missing)}; "
                f"it declares spaces for {declared}"
            )
        return cls.observation_spaces[actor_class], cls.action_spaces[actor_class]

    @classmethod
    def describe(cls, config: Mapping[str, Any], actor_class: str) -> dict[str, Any]:
        observation, action = _codecs(cls, config, actor_class)
        return {
            "observation": observation.schema,
            "action": action.schema,
            "observation_space": observation.description,
            "action_space": action.description,
            "default_action": as_json(action.to_payload(default_value(action.space))),
        }

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # The subclass's own start and update see Gymnasium values; a super() call from an
        # override reaches the wrapped parent, which must not convert a second time.
        if "start" in cls.__dict__:
            cls.start = _converting(cls.__dict__["start"], lambda env, args: args, _observations_of_start)
        if "update" in cls.__dict__:
            cls.update = _converting(
                cls.__dict__["update"], lambda env, args: (env.native_actions(args[0]),), _observations_of_step
            )

    def native_actions(self, actions: Mapping[str, Any]) -> dict[str, Any]:
        """Actions as they crossed the log, as members of their action spaces; one outside its
        space raises :class:`~trialog.errors.TrialError` with reason ``invalid_action``."""
        out = {}
        for actor, value in actions.items():
            codec = self._codec(actor, "action")
            try:
                native = codec.from_payload(value)
                valid = codec.contains(native)
            except Exception:  # whatever a malformed value makes NumPy or gymnasium raise: not a valid action
                valid = False
            if not valid:
                raise TrialError(
                    f"{type(self).__name__}: actor {actor!r} sent {value!r}, outside its action space {codec.space}",
                    trial_id=self.trial.trial_id,
                    reason="invalid_action",
                )
            out[actor] = native
        return out

    def payload_observations(self, observations: Mapping[str, Any]) -> dict[str, Any]:
        """Observations (members of their spaces) as they cross the log; one outside its
        space raises :class:`~trialog.errors.TrialError` naming the actor and the space."""
        out = {}
        for actor, value in observations.items():
            codec = self._codec(actor, "observation")
            try:
                payload = codec.to_payload(value)
                valid = codec.contains(codec.from_payload(payload))
            except Exception:  # as for actions: a value the conversion cannot take is not in the space
                valid = False
            if not valid:
                raise TrialError(
                    f"{type(self).__name__}: the observation of {actor!r} is {_short(value)}, "
                    f"outside its observation space {codec.space}",
                    trial_id=self.trial.trial_id,
                )
            out[actor] = payload
        return out

    def _codec(self, actor: str, part: str) -> SpaceCodec:
        classes = {a.name: a.actor_class for a in self.trial.actors}
        if actor not in classes:
            raise TrialError(
                f"{type(self).__name__}: {actor!r} is not an actor of the trial; actors: {list(classes)}",
                trial_id=self.trial.trial_id,
            )
        # Once per trial and class: deriving the codecs costs far more than a tick.
        cache = self.__dict__.setdefault("_space_codecs", {})
        if classes[actor] not in cache:
            cache[classes[actor]] = _codecs(type(self), self.trial.config, classes[actor])
        observation, action = cache[classes[actor]]
        return observation if part == "observation" else action


def _codecs(cls: type[SpacesEnvironment], config: Mapping[str, Any], actor_class: str) -> tuple[SpaceCodec, SpaceCodec]:
    observation, action = cls.spaces_for(config, actor_class)
    name = cls.space_name or cls.__name__
    namespace = f"trialog.env.{name}.{actor_class}"
    where = f"{{}} space of actor class {actor_class!r} of {name}"
    return (
        space_codec(observation, namespace=namespace, name="Observation", where=where.format("observation")),
        space_codec(action, namespace=namespace, name="Action", where=where.format("action")),
    )


def _converting(method: Callable, convert_in: Callable, convert_out: Callable) -> Callable:
    @functools.wraps(method)
    def converted(self: SpacesEnvironment, *args: Any) -> Any:
        if self.__dict__.get("_converting"):
            return method(self, *args)
        self._converting = True
        try:
            result = method(self, *convert_in(self, args))
        finally:
            self._converting = False
        return convert_out(self, result)

    return converted


def _observations_of_start(env: SpacesEnvironment, observations: Any) -> Any:
    return env.payload_observations(observations) if isinstance(observations, Mapping) else observations


def _observations_of_step(env: SpacesEnvironment, step: Any) -> Any:
    if not isinstance(step, Step):
        return step  # the runtime says what update must return
    return dataclasses.replace(step, observations=env.payload_observations(step.observations))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
