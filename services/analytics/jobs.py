"""The shipped analytics jobs, as plain functions over Quix Streams state (the wiring is in
:mod:`trialog.services.analytics.app`; these run and are tested without Kafka).

Two stages:

1. :func:`fold_trial` — keyed by trial ID, over ``events``: folds a trial's events into
   its result (returns per actor by the datalog's rule, pairing, phase, ticks and tick
   timing, reward sources) and emits it when the trial ends, and again when a late
   reward changes it. Results go to ``analytics.trials``.
2. :func:`contributions` + :func:`fold_group` — each trial result contributes to one
   group per summary job (its pairing, its phase, its environment, …); the group's state
   keeps one contribution **per trial**, replaced when the trial's result changes, and
   the summary is recomputed from them. So a result delivered twice (at-least-once) or
   revised (a late reward) is never counted twice.

Rewards follow the datalog (docs/datalog.md): a reward the orchestrator dead-letters
(:func:`trialog.protocol.owners.reward_problem`: out of bounds, for a tick to come, naming its
sender, reaching nobody but its sender…) counts for nothing; one reward per (tick,
sender, receiver), the first in the log; a reward reaches the actors
:func:`trialog.protocol.trial.reaches` says (a wildcard leaves its sender out); the reward
of (actor, tick) is the confidence-weighted mean of its rewards (I-4); a trial's return
for an actor is the sum over its ticks up to the final tick. The environment's reward an
observation carries reaches :func:`fold_trial` as the reward record it stands for, just
before the observation (:class:`trialog.analytics.EventDeserializer` reads it so), and counts
alike. The rolling means order trials by the time their ``trial.ended`` was logged (then by
trial ID), so they do not depend on which partition was read first.
"""

from __future__ import annotations

from typing import Any

from trialog.protocol.events import Event, Observation, Reward, TrialEnded, TrialStarted
from trialog.protocol.owners import reward_problem
from trialog.protocol.trial import reaches

NO_PHASE = "(no phase)"
KINDS = frozenset({TrialStarted.KIND, Observation.KIND, Reward.KIND, TrialEnded.KIND})
SUMMARY_JOBS = ("returns-by-pairing", "returns-by-phase", "environments", "human-vs-agent", "reward-sources")


# --- stage 1: one trial ------------------------------------------------------------------------------------


def fold_trial(event: Event, key: str, timestamp: int, headers: Any, state) -> dict | None:
    """Fold one event of a trial into its state; the trial's result when it changed at or after its end."""
    match event:
        case TrialStarted():
            state.set("trial", {
                "spec": event.spec, "environment": event.environment,
                "experiment": getattr(event, "experiment", "") or "", "phase": getattr(event, "phase", "") or "",
                "actors": [[a.name, a.actor_class, a.implementation, bool(a.client)] for a in event.actors],
            })  # fmt: skip
            return None
        case Observation():
            first, last, last_tick, gap_max = state.get("obs", [timestamp, timestamp, -1, 0])
            if event.tick > last_tick:
                if last_tick >= 0:
                    gap_max = max(gap_max, timestamp - last)
                state.set("obs", [first, timestamp, event.tick, gap_max])
            return None
        case Reward():
            return _reward(event, state)
        case TrialEnded():
            if state.get("ended") is None and state.get("trial") is not None:
                state.set("ended", {"reason": event.reason, "tick": event.tick, "ended_ms": timestamp})
                return trial_result(key, state)
    return None


def _reward(reward: Reward, state) -> dict | None:
    """Fold a reward into the (actor, tick) cells it reaches and the running returns.

    State keys are small and per item (one per reward identity, one per cell), so a
    reward costs a few lookups however long the trial: a cell's aggregate changes from
    Σcv/Σc before to after, and the actor's running return by the difference."""
    trial = state.get("trial")
    if trial is None:
        return None
    ended = state.get("ended")
    current = ended["tick"] if ended is not None else max(state.get("obs", [0, 0, 0, 0])[2], 0)
    if reward_problem(reward, current, {name: actor_class for name, actor_class, _, _ in trial["actors"]}) is not None:
        return None  # dead-lettered by the orchestrator: it counts for nothing, as in the datalog
    identity = f"seen|{reward.tick}|{reward.sender}|{reward.receiver}"
    if state.get(identity) is not None:
        return None  # a duplicate (I-8): the first in the log counts
    state.set(identity, 1)
    confidence = reward.confidence if reward.confidence > 0 else 0.0
    returns = state.get("returns") or {name: 0.0 for name, *_ in trial["actors"]}
    for name, actor_class, _, _ in trial["actors"]:
        if reaches(reward.receiver, reward.sender, name, actor_class) and confidence > 0:
            key = f"cell|{name}|{reward.tick}"
            weighted, total = state.get(key, [0.0, 0.0])
            before = weighted / total if total > 0 else 0.0
            weighted, total = weighted + confidence * reward.value, total + confidence
            state.set(key, [weighted, total])
            returns[name] += weighted / total - before
    state.set("returns", returns)
    state.set("last_reward_tick", max(reward.tick, state.get("last_reward_tick", 0)))
    sources = state.get("sources", {})
    total, count = sources.get(reward.sender, [0.0, 0])
    sources[reward.sender] = [total + reward.value, count + 1]
    state.set("sources", sources)
    # A reward after the end revises the trial's result.
    return trial_result(reward.trial_id, state) if state.get("ended") is not None else None


def trial_result(trial_id: str, state) -> dict:
    trial, ended = state.get("trial"), state.get("ended")
    returns = dict(state.get("returns") or {name: 0.0 for name, *_ in trial["actors"]})
    # Rewards for ticks after the final one reach no sample in the datalog: leave them out.
    for tick in range(ended["tick"] + 1, state.get("last_reward_tick", 0) + 1):
        for name in returns:
            weighted, total = state.get(f"cell|{name}|{tick}", [0.0, 0.0])
            if total > 0:
                returns[name] -= weighted / total
    first, last, last_tick, gap_max = state.get("obs", [0, 0, 0, 0])
    return {
        "trial_id": trial_id,
        "spec": trial["spec"],
        "environment": trial["environment"],
        "experiment": trial["experiment"],
        "phase": trial["phase"],
        "pairing": " + ".join(impl for _, _, impl, _ in trial["actors"]),
        "actors": [{"name": n, "class": c, "implementation": i, "human": h} for n, c, i, h in trial["actors"]],
        "returns": returns,
        "total": sum(returns.values()),
        "ticks": max(last_tick, 0),
        "reason": ended["reason"],
        "ended_ms": ended["ended_ms"],
        "tick_ms_mean": (last - first) / last_tick if last_tick > 0 else None,
        "tick_ms_max": gap_max if last_tick > 0 else None,
        "reward_sources": {s: {"total": t, "count": c} for s, (t, c) in sorted(state.get("sources", {}).items())},
    }


# --- stage 2: summaries over trials ------------------------------------------------------------------------------


def contributions(result: dict) -> list[dict]:
    """What one trial result contributes to each summary job: (job, group key, contribution)."""
    order = [result["ended_ms"], result["trial_id"]]
    phase = f"{result['experiment']}/{result['phase']}" if result["phase"] else NO_PHASE
    out = [
        {
            "job": "returns-by-pairing",
            "key": result["pairing"],
            "trial": result["trial_id"],
            "c": {"order": order, "returns": result["returns"]},
        },
        {
            "job": "returns-by-phase",
            "key": phase,
            "trial": result["trial_id"],
            "c": {"order": order, "returns": result["returns"]},
        },
        {
            "job": "environments",
            "key": result["environment"],
            "trial": result["trial_id"],
            "c": {
                "ticks": result["ticks"],
                "tick_ms_mean": result["tick_ms_mean"],
                "tick_ms_max": result["tick_ms_max"],
            },
        },
    ]
    humans = [result["returns"][a["name"]] for a in result["actors"] if a["human"]]
    agents = [result["returns"][a["name"]] for a in result["actors"] if not a["human"]]
    if humans and agents:
        contribution = {"human": sum(humans) / len(humans), "agent": sum(agents) / len(agents)}
        out.append(
            {"job": "human-vs-agent", "key": result["environment"], "trial": result["trial_id"], "c": contribution}
        )
    for sender, source in result["reward_sources"].items():
        out.append({"job": "reward-sources", "key": sender, "trial": result["trial_id"], "c": source})
    return out


def group_key(item: dict) -> str:
    return f"{item['job']}|{item['key']}"


def fold_group(item: dict, state, *, window: int) -> dict:
    """Replace the trial's contribution to its group and return the group's new summary."""
    per_trial = state.get("c", {})
    per_trial[item["trial"]] = item["c"]
    state.set("c", per_trial)
    summary = SUMMARIES[item["job"]](per_trial, window)
    return {"job": item["job"], "key": item["key"], **summary}


def _returns(per_trial: dict, window: int) -> dict:
    """Mean return over all trials and over the last ``window`` ones: summed over actors
    (``mean``, ``rolling_mean``) and per actor name (``*_by_actor``)."""
    ordered = sorted(per_trial.values(), key=lambda c: c["order"])
    last = ordered[-window:]

    def mean(items: list[dict], actor: str | None = None) -> float:
        values = [c["returns"].get(actor, 0.0) if actor else sum(c["returns"].values()) for c in items]
        return sum(values) / len(values)

    actors = sorted({name for c in ordered for name in c["returns"]})
    return {
        "trials": len(ordered),
        "window": window,
        "mean": mean(ordered),
        "rolling_mean": mean(last),
        "mean_by_actor": {a: mean(ordered, a) for a in actors},
        "rolling_mean_by_actor": {a: mean(last, a) for a in actors},
        "last": [sum(c["returns"].values()) for c in last],
    }


def _environment(per_trial: dict, window: int) -> dict:
    timed = [c for c in per_trial.values() if c["tick_ms_mean"] is not None]
    ticks = sum(c["ticks"] for c in timed)
    mean_ms = sum(c["tick_ms_mean"] * c["ticks"] for c in timed) / ticks if ticks else None
    return {
        "trials": len(per_trial),
        "ticks": sum(c["ticks"] for c in per_trial.values()),
        "tick_ms_mean": mean_ms,
        "ticks_per_s_per_trial": 1000 / mean_ms if mean_ms else None,
        "tick_ms_max": max((c["tick_ms_max"] for c in timed), default=None),
    }


def _human_vs_agent(per_trial: dict, window: int) -> dict:
    n = len(per_trial)
    return {
        "trials": n,
        "human_mean": sum(c["human"] for c in per_trial.values()) / n,
        "agent_mean": sum(c["agent"] for c in per_trial.values()) / n,
        "human_wins": sum(c["human"] > c["agent"] for c in per_trial.values()),
        "agent_wins": sum(c["human"] < c["agent"] for c in per_trial.values()),
        "ties": sum(c["human"] == c["agent"] for c in per_trial.values()),
    }


def _reward_source(per_trial: dict, window: int) -> dict:
    total = sum(c["total"] for c in per_trial.values())
    return {
        "trials": len(per_trial),
        "total": total,
        "count": sum(c["count"] for c in per_trial.values()),
        "mean_per_trial": total / len(per_trial),
    }


SUMMARIES = {
    "returns-by-pairing": _returns,
    "returns-by-phase": _returns,
    "environments": _environment,
    "human-vs-agent": _human_vs_agent,
    "reward-sources": _reward_source,
}
