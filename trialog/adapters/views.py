"""Views of hosted environments for people: what a page needs to draw a trial,
compact (a few hundred bytes per tick), published with each tick's observations.

An adapter's environment config picks one by name (``view: overcooked``) or names the
operator's own function by import path (``view: "my_project.views:draw"``, called as
``draw(env, actors)`` like the shipped ones). ``view`` is one of the adapter's code keys:
the environment service takes it from the spec it was started with, never from a record
(I-9), so a start request cannot make it import anything.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

# CoGrid's object type ids (cogrid 0.3 Overcooked registry) and how a page names them.
_TILES = {
    "counter": "C",
    "pot": "P",
    "onion_stack": "O",
    "tomato_stack": "T",
    "plate_stack": "D",
    "delivery_zone": "S",
    "wall": "W",
}
_ITEMS = ("onion", "onion_soup", "plate", "tomato", "tomato_soup")


def overcooked(env: Any, actors: Mapping[str, Any]) -> dict[str, Any]:
    """CoGrid Overcooked: the kitchen's fixed tiles, loose items, pots, cooks and score.

    ``env`` is CoGrid's environment (unwrapped), ``actors`` maps actor names to its agent ids.
    Directions are CoGrid's: 0 right, 1 down, 2 left, 3 up.
    """
    state = env._env_state  # noqa: SLF001  (CoGrid keeps its live state here; the grid objects are not kept in sync)
    names = {v: k for k, v in env._type_ids.items()}  # noqa: SLF001
    types = np.asarray(state.object_type_map)
    placed = np.asarray(state.object_state_map)
    tiles, items = [], []
    for r in range(types.shape[0]):
        row = []
        for c in range(types.shape[1]):
            name = names.get(int(types[r, c]), "")
            row.append(_TILES.get(name, "."))
            if name in _ITEMS:
                items.append([r, c, name])  # on the floor
            elif name == "counter" and names.get(int(placed[r, c])) in _ITEMS:
                items.append([r, c, names[int(placed[r, c])]])
        tiles.append("".join(row))
    extra = state.extra_state or {}
    pots = []
    for (r, c), contents, timer in zip(
        np.asarray(extra.get("overcooked.pot_positions", [])).tolist(),
        np.asarray(extra.get("overcooked.pot_contents", [])).tolist(),
        np.asarray(extra.get("overcooked.pot_timer", [])).tolist(),
        strict=False,
    ):
        held = [names.get(int(x), "") for x in contents if int(x) >= 0]
        full = len(held) == len(contents)
        pots.append({"r": r, "c": c, "onions": held.count("onion"), "tomatoes": held.count("tomato"),
                     "timer": int(timer), "cooking": full and timer > 0, "ready": full and timer == 0})  # fmt: skip
    possible = list(env.possible_agents)  # the state's arrays are in this order
    cooks = []
    for actor, agent in actors.items():
        i = possible.index(agent)
        inventory = [int(x) for x in np.asarray(state.agent_inv)[i].tolist() if int(x) >= 0]
        r, c = (int(v) for v in np.asarray(state.agent_pos)[i])
        cooks.append(
            {
                "actor": actor,
                "r": r,
                "c": c,
                "dir": int(np.asarray(state.agent_dir)[i]),
                "holding": names.get(inventory[0]) if inventory else None,
            }
        )
    return {
        "kind": "overcooked",
        "tiles": tiles,
        "items": items,
        "pots": pots,
        "cooks": cooks,
        "score": float(getattr(env, "cumulative_score", 0.0)),
    }


VIEWS: dict[str, Callable[[Any, Mapping[str, Any]], dict[str, Any]]] = {"overcooked": overcooked}


@functools.cache
def view_function(name: str) -> Callable[[Any, Mapping[str, Any]], dict[str, Any]]:
    """A shipped view by name, or the operator's by import path ``module:function``."""
    if name in VIEWS:
        return VIEWS[name]
    from trialog.spec import load_entry

    draw = load_entry(name, what="view")
    if not callable(draw):
        raise TypeError(f"view {name!r} is not a function")
    return draw
