"""``trialog train PRESET``: Coach's improve loop, over trials.

A **preset** is one Python file that defines ``preset = Preset(...)``: the experiment's name, the spec, the
learning actor implementation and its hyperparameters, the schedule and the validation rule::

    from trialog.learn.train import Preset, Schedule, Validation

    preset = Preset(
        name="dqn-cartpole",
        spec="../examples/cartpole/spec.yaml",          # relative to the preset file
        implementation="dqn",
        agent={"learning_rate": 2.3e-3},           # over the implementation's config in the spec
        schedule=Schedule(
            heatup_steps=1_000, steps_between_evaluations=5_000, evaluation_trials=10, total_steps=50_000
        ),
        validation=Validation(min_reward_threshold=475, max_episodes_to_achieve_reward=1_000),
    )

The run starts the spec's services and a learner as local processes (as ``trialog run --serve`` does), then
goes through the phases, each trial labelled with the experiment and its phase in the log:

- **heatup** — exploration-only actions, no training: fills the learner's memory;
- **train** — the policy acts with exploration while the learner trains;
- **evaluate** — greedy actions over N whole trials, their mean return recorded against the env steps
  trained on so far (after the learner has published a version that has seen them).

It ends with a table and a plot (PNG, with its CSV and JSON beside it) of the evaluation return per env step,
and ``summary.json`` (:mod:`trialog.learn.report`); the exit code says whether the validation rule held (0) or
not (1).

Through the log the run is :mod:`trialog.learn.through_log`'s; ``trialog train PRESET --in-process`` runs the
same preset in one process over the environment directly, no broker (:mod:`trialog.learn.in_process`). What
both modes share lives here: the preset, the schedule, the checks and the result; :mod:`trialog.learn.report`
writes its table, plot and summary.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trialog.errors import SpecError, TrialogError
from trialog.settings import Settings


@dataclass(frozen=True)
class Schedule:
    heatup_steps: int = 1_000
    steps_between_evaluations: int = 5_000
    evaluation_trials: int = 10
    total_steps: int = 50_000
    concurrency: int = 8  # trials at once in heatup and train (evaluation runs all its trials at once)
    # Through the log an evaluation's trials pin its version and training goes on beside them (run_phases).
    evaluate_beside_training: bool = False

    def __post_init__(self) -> None:
        # Zero trials at once, or a budget that never ends a phase, would run forever doing nothing.
        at_least = {
            "heatup_steps": 0,
            "steps_between_evaluations": 1,
            "evaluation_trials": 1,
            "total_steps": 1,
            "concurrency": 1,
        }
        for name, low in at_least.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise TrialogError(f"schedule: {name} must be an integer ≥ {low}, not {value!r}")
        if not isinstance(beside := self.evaluate_beside_training, bool):
            raise TrialogError(f"schedule: evaluate_beside_training must be true or false, not {beside!r}")


@dataclass(frozen=True)
class Validation:
    """Coach's rule: the mean evaluation return reaches ``min_reward_threshold`` within
    ``max_episodes_to_achieve_reward`` heatup+train trials (None: within the budget)."""

    min_reward_threshold: float
    max_episodes_to_achieve_reward: int | None = None


@dataclass(frozen=True)
class Preset:
    name: str  # the experiment: trials are labelled with it, and the model is named after it
    spec: str
    implementation: str
    agent: Mapping[str, Any] = field(default_factory=dict)
    actors: tuple[str, ...] = ()  # the trial's actors the implementation plays (default: all of them)
    schedule: Schedule = Schedule()
    validation: Validation | None = None
    seed: int = 0  # trial i gets seed + i
    environment_processes: int = 1
    actor_processes: int = 1
    stop_when_valid: bool = False  # end at the first evaluation that meets the rule
    # The reward senders the learner learns from (shell patterns: env, 'person:*'…; empty: every source), and
    # judges rating its heatup and train trials' steps late, as a person on the watch page does: rate(before,
    # after, final) functions by entry (`trialog judge`, one process each, beside a gateway; person:judge-<i>).
    learn_from: tuple[str, ...] = ()
    judges: tuple[str, ...] = ()
    # Who plays the seats of people (client implementations) in its trials, through the gateway: a scripted
    # stand-in (`module:function`, as `trialog teaming --scripted`); empty: each seat's join link is printed.
    person: str = ""
    file: str = ""  # set by load_preset

    @property
    def model(self) -> str:
        """The model its learner trains and its policy follows: the agent's ``model``, else the name."""
        return self.agent.get("model", self.name)

    # What a curriculum (trialog.learn.curriculum) changes: the partners its stages may give each
    # actor, each trial's implementations and stage label, and the phases run once per stage.
    def partners_of(self, spec) -> dict[str, tuple[str, ...]]:
        return {}

    def trial_setup(self, played: Mapping[str, str], seed: int) -> dict[str, Any]:
        return {"implementations": dict(played)}

    async def run(self, phases, settings: Settings, spec, **kwargs) -> TrainResult:
        """Through the log: ``phases`` (:func:`trialog.learn.through_log.run_phases`) once."""
        return await phases(settings, self, spec, **kwargs)

    def run_in_process(self, run) -> TrainResult:
        return run.run()


def judging(preset: Preset) -> tuple[Callable[[str], bool] | None, list[Callable]]:
    """Which senders the preset's learner learns from (None: all), and its judges' rating
    functions; a preset whose learner would learn from no source is refused."""
    from trialog.protocol.rewards import senders_matching
    from trialog.spec import load_entry
    from trialog.tools.judge import JUDGE_NAME

    learn_from = senders_matching(preset.learn_from)
    judges = [load_entry(entry, what="judge") for entry in preset.judges]
    senders = ["env", *(f"person:{JUDGE_NAME}-{i}" for i in range(len(judges)))]
    if learn_from is not None and not any(map(learn_from, senders)):
        raise TrialogError(
            f"preset {preset.name}: learn_from {list(preset.learn_from)} matches none of its reward sources "
            f"({', '.join(senders)}): the learner would learn from nothing"
        )
    return learn_from, judges


def shipped_presets() -> Path:
    """The presets shipped with Trialog: inside the package when installed from a wheel, at
    the top of the repository in a checkout."""
    package = Path(__file__).resolve().parents[1]
    return next(
        (d for d in (package / "presets", package.parent / "presets") if d.is_dir()), package.parent / "presets"
    )


def load_preset(path: str | Path) -> Preset:
    """Import a preset file and return its ``preset``; its spec path is made absolute. A
    name that is no file names a shipped preset (``dqn_cartpole``, from any folder)."""
    path = Path(path)
    if not path.exists() and (shipped := shipped_presets() / f"{path.stem}.py").exists() and path.parent == Path("."):
        path = shipped
    if not path.exists():
        names = ", ".join(sorted(p.stem for p in shipped_presets().glob("*.py")))
        raise TrialogError(f"preset {path} not found: name a preset file, or a shipped preset ({names})")
    path = path.resolve()
    module_spec = importlib.util.spec_from_file_location(f"trialog_preset_{path.stem}", path)
    if module_spec is None or module_spec.loader is None:
        raise TrialogError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except FileNotFoundError as exc:
        raise TrialogError(f"preset {path} not found") from exc
    preset = getattr(module, "preset", None)
    if not isinstance(preset, Preset):
        raise TrialogError(f"{path} must define `preset = Preset(...)` (from trialog.learn.train import Preset)")
    return dataclasses.replace(preset, spec=str((path.parent / preset.spec).resolve()), file=str(path))


def derived_spec(preset: Preset, out_dir: Path) -> Path:
    """The spec with the preset's agent parameters and model name over the implementation's
    config, and the network sizes from the spaces of the classes it plays
    (:mod:`trialog.learn.spaces`), written into the run's folder (relative schema files made
    absolute): what the learner and the policies of both modes are built from."""
    from trialog.learn.spaces import implementation_sized
    from trialog.spec import load_spec

    source = Path(preset.spec)
    raw = yaml.safe_load(source.read_text())
    impl = (raw.get("actors") or {}).get(preset.implementation)
    if not isinstance(impl, dict):
        raise SpecError(f"no actor implementation {preset.implementation!r}", file=str(source))
    config = {**(impl.get("config") or {}), **preset.agent, "model": preset.model}
    # An evaluation's trials pin the version they evaluate while training goes on (run_phases).
    impl["overridable"] = sorted({*(impl.get("overridable") or []), "model"})
    spec = load_spec(source)
    classes = {a.actor_class for a in spec.trial.actors if a.name in played_actors(preset, spec)}
    impl["config"] = implementation_sized(spec, preset.implementation, config, classes)
    for cls in (raw.get("actor_classes") or {}).values():
        for key in ("observation", "action", "config"):
            value = cls.get(key) if isinstance(cls, dict) else None
            if isinstance(value, str) and value.endswith(".avsc"):
                cls[key] = str((source.parent / value).resolve())
    out = out_dir / f"{source.stem}.{preset.name}.yaml"
    out.write_text(yaml.safe_dump(raw, sort_keys=False))
    return out


# --- the run ------------------------------------------------------------------------------------------------


@dataclass
class Evaluation:
    env_steps: int  # heatup + train steps before this evaluation
    episodes: int  # heatup + train trials before it
    mean_return: float
    returns: list[float]
    model_version: int


@dataclass
class TrainResult:
    evaluations: list[Evaluation] = field(default_factory=list)
    env_steps: int = 0
    episodes: int = 0
    seconds: float = 0.0
    valid: bool | None = None  # None: no rule
    mode: str = "log"  # "log": through the log (services and a learner); "in-process"
    algorithm: str = ""
    on_policy: bool | None = None
    discarded: int | None = None  # transitions an on-policy learner threw away (acted by another version)
    model_version: int = 0  # the last version published
    resumed_from: int = 0  # the version an earlier run left that this one trained on from (0: a fresh run)

    @property
    def summary_fields(self) -> dict[str, Any]:  # what summary.json adds (a curriculum's stages)
        return {}

    def first_reaching(self, threshold: float) -> Evaluation | None:
        return next((e for e in self.evaluations if e.mean_return >= threshold), None)

    def meets(self, rule: Validation | None) -> bool:
        """Whether an evaluation reached the rule's threshold within its episodes (no rule: it holds)."""
        if rule is None:
            return True
        first = self.first_reaching(rule.min_reward_threshold)
        return first is not None and (
            rule.max_episodes_to_achieve_reward is None or first.episodes <= rule.max_episodes_to_achieve_reward
        )


def played_actors(preset: Preset, spec) -> dict[str, str]:
    """Actor → the preset's implementation, for the trial's actors it plays (all of them by
    default); naming an actor the trial does not have is an error."""
    names = [a.name for a in spec.trial.actors]
    unknown = [a for a in preset.actors if a not in names]
    if unknown:
        raise SpecError(
            f"preset {preset.name} names actors the trial does not have: {', '.join(map(repr, unknown))} "
            f"(its actors: {', '.join(names)})",
            file=spec.file,
        )
    return {a: preset.implementation for a in names if not preset.actors or a in preset.actors}


def implementations_played(preset: Preset, spec) -> set[str]:
    """Every implementation the preset's trials may give an actor: the learning one, the spec's
    defaults for the others, a curriculum's partners."""
    played = played_actors(preset, spec)
    partners = preset.partners_of(spec).values()
    return {played.get(a.name, a.implementation) for a in spec.trial.actors}.union(*partners)


def hosted_implementations(preset: Preset, spec) -> list[str]:
    """The implementations the preset's trials play that an actor service hosts (not people's):
    only these, since each hosted one is a consumer group reading every record (a spec may
    declare more: CartPole's has dqn, ppo and random, and a DQN run reads the log once, not thrice)."""
    return sorted(i for i in implementations_played(preset, spec) if i in spec.actors and spec.actors[i].served_here)


def people_seated(preset: Preset, spec) -> list[str]:
    """The people (client implementations) the preset's trials seat: they play through a gateway."""
    return sorted(i for i in implementations_played(preset, spec) if i in spec.actors and spec.actors[i].client)


def learner_for(preset: Preset, spec) -> Any:
    """The learner of the preset's implementation, built from its config in ``spec`` (the derived
    spec) — as the learner service builds it; a clear error when there is none to build."""
    from trialog.actor import Policy
    from trialog.spec import load_entry

    impl = spec.actors.get(preset.implementation)
    if impl is None:
        raise SpecError(
            f"preset {preset.name}: no actor implementation {preset.implementation!r}; "
            f"the spec declares {', '.join(spec.actors)}",
            file=spec.file,
        )
    target = load_entry(impl.entry, what=f"actor implementation {preset.implementation}")
    if not (inspect.isclass(target) and issubclass(target, Policy)):
        raise SpecError(
            f"preset {preset.name}: actor implementation {preset.implementation!r} ({impl.entry}) is not a "
            "trialog.actor.Policy: nothing to learn",
            file=spec.file,
        )
    if getattr(target.learner, "__func__", None) is Policy.learner.__func__:
        raise SpecError(
            f"preset {preset.name}: {impl.entry} has no learner (a Policy that learns defines the classmethod "
            "`learner(config)`, see trialog.learn.dqn)",
            file=spec.file,
        )
    learner = target.learner(dict(impl.config))
    missing = [m for m in ("add", "rounds_due", "train_round", "tensors", "metadata") if not hasattr(learner, m)]
    if missing:
        raise TrialogError(
            f"preset {preset.name}: the learner of {impl.entry} ({type(learner).__name__}) lacks {', '.join(missing)}"
        )
    classes = {a.name: a.actor_class for a in spec.trial.actors}
    wrong = [a for a in played_actors(preset, spec) if impl.classes and classes[a] not in impl.classes]
    if wrong:
        raise SpecError(
            f"preset {preset.name}: {preset.implementation!r} plays classes {', '.join(impl.classes)}, not the "
            f"class of {', '.join(f'{a} ({classes[a]})' for a in wrong)}; name the actors it plays (`actors=`)",
            file=spec.file,
        )
    return learner
