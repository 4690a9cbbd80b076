"""A scripted cook for CoGrid's Overcooked that plans over its observation.

The cook reads the grid, its own and its partner's position and inventory, and
the pots' state out of the observation vector, picks the next target (onion →
pot until it holds three, then a dish → the cooked soup → the serving counter),
and walks there along a shortest path (breadth-first search over free cells).
Two of them deliver a soup every few dozen ticks in ``Overcooked-CrampedRoom-V0``;
two random actors almost never do.

It expects the observation of CoGrid's default Overcooked feature set (the
``features`` list of ``cogrid.envs.cramped_room_config``, which every registered
two-cook layout shares). The layout of that vector is written out in
:class:`Kitchen` below; a different feature set fails at the first observation
with a message saying so.
"""

from __future__ import annotations

import zlib
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from trialog.actor import Agent
from trialog.environment import ActorInfo, TrialInfo
from trialog.errors import TrialogError

# CoGrid's cardinal action set, and its direction numbering with each direction's step.
MOVE_UP, MOVE_DOWN, MOVE_LEFT, MOVE_RIGHT, INTERACT, TOGGLE, NOOP = range(7)
STEP_OF_MOVE = {MOVE_UP: (-1, 0), MOVE_DOWN: (1, 0), MOVE_LEFT: (0, -1), MOVE_RIGHT: (0, 1)}
MOVE_OF_STEP = {step: move for move, step in STEP_OF_MOVE.items()}
STEP_OF_DIRECTION = ((0, 1), (1, 0), (0, -1), (-1, 0))  # right, down, left, up

Cell = tuple[int, int]


@dataclass(frozen=True)
class Pot:
    cell: Cell
    onions: int
    cooking: bool
    ready: bool

    @property
    def open(self) -> bool:
        """Takes another onion (CoGrid pots hold three and start cooking when full)."""
        return self.onions < 3 and not self.cooking and not self.ready


@dataclass(frozen=True)
class Kitchen:
    """One observation, decoded.

    The vector is the focal cook's per-agent features, then each other cook's
    (ascending index), then the global ones; within a block, features come in
    the config's order: direction one-hot (4), inventory one-hot (5: onion,
    onion_soup, plate, tomato, tomato_soup), next-to-counter (4), next-to-pot
    (16), pot features (12 per pot, 2 pots: reachable, ready, empty, cooking,
    partial, onions, tomatoes, timer, dy, dx, row, col), offsets to the other
    cooks (2 each), position (row, col), can-move (4). The global part is ten
    7×11 masks, one per object type in :data:`MASKS`.
    """

    MASKS = ("counter", "delivery_zone", "onion", "onion_soup", "onion_stack",
             "plate", "plate_stack", "tomato", "tomato_soup", "tomato_stack")  # fmt: skip
    INVENTORY = ("onion", "onion_soup", "plate", "tomato", "tomato_soup")
    GRID = (7, 11)
    POTS, POT_FEATURES = 2, 12

    me: Cell
    facing: Cell
    holding: str | None
    partners: tuple[tuple[Cell, str | None], ...]
    pots: tuple[Pot, ...]
    masks: dict[str, np.ndarray]

    @classmethod
    def parse(cls, observation: np.ndarray) -> Kitchen:
        obs = np.asarray(observation, dtype=np.float64).ravel()
        global_size = len(cls.MASKS) * cls.GRID[0] * cls.GRID[1]
        n = cls._cooks(len(obs) - global_size)
        block = cls._block_size(n)
        blocks = [cls._agent_block(obs[i * block : (i + 1) * block], n) for i in range(n)]
        masks = obs[n * block :].reshape(len(cls.MASKS), *cls.GRID) > 0.5
        (me, direction, holding, pots) = blocks[0]
        step = STEP_OF_DIRECTION[direction]
        return cls(
            me=me,
            facing=(me[0] + step[0], me[1] + step[1]),
            holding=holding,
            partners=tuple((pos, held) for pos, _, held, _ in blocks[1:]),
            pots=pots,
            masks=dict(zip(cls.MASKS, masks, strict=True)),
        )

    @classmethod
    def _block_size(cls, n: int) -> int:
        return 4 + 5 + 4 + 16 + cls.POTS * cls.POT_FEATURES + 2 * (n - 1) + 2 + 4

    @classmethod
    def _cooks(cls, per_agent_size: int) -> int:
        for n in range(1, 9):
            if n * cls._block_size(n) == per_agent_size:
                return n
        raise TrialogError(
            f"this observation ({per_agent_size} per-agent values) is not CoGrid's default Overcooked feature set; "
            "the planner reads agent_dir, overcooked_inventory, next_to_counter, next_to_pot, ordered_pot_features, "
            "dist_to_other_players, agent_position, can_move_direction and object_type_masks, in that order"
        )

    @classmethod
    def _agent_block(cls, values: np.ndarray, n: int) -> tuple[Cell, int, str | None, tuple[Pot, ...]]:
        direction = int(np.argmax(values[0:4]))
        inventory = values[4:9]
        holding = cls.INVENTORY[int(np.argmax(inventory))] if inventory.max() > 0.5 else None
        pots = []
        for p in values[29 : 29 + cls.POTS * cls.POT_FEATURES].reshape(cls.POTS, cls.POT_FEATURES):
            reachable, ready, _empty, cooking, _partial, onions = p[:6]
            if reachable > 0.5:  # absent pots are zero padding
                pots.append(Pot((int(p[10]), int(p[11])), int(onions), bool(cooking > 0.5), bool(ready > 0.5)))
        at = 29 + cls.POTS * cls.POT_FEATURES + 2 * (n - 1)
        position = (int(values[at]), int(values[at + 1]))
        return position, direction, holding, tuple(pots)

    def cells(self, *names: str) -> set[Cell]:
        found = np.zeros(self.GRID, dtype=bool)
        for name in names:
            found |= self.masks[name]
        return {(int(r), int(c)) for r, c in zip(*np.nonzero(found), strict=True)}

    @property
    def items(self) -> set[Cell]:
        """Cells holding a loose object (on a counter or on the floor)."""
        return self.cells("onion", "onion_soup", "plate", "tomato", "tomato_soup")

    @property
    def blocked(self) -> set[Cell]:
        """Cells nobody can walk on."""
        return self.cells(*self.MASKS) | {pot.cell for pot in self.pots}

    @property
    def free_counters(self) -> set[Cell]:
        return self.cells("counter") - self.items


class OvercookedPlanner(Agent):
    """Plays one cook of CoGrid's Overcooked by planning over its observation.

    Deterministic given the trial seed, the actor's name and the observations:
    when it is stuck behind its partner it steps aside at random, from a NumPy
    generator seeded with both.
    """

    def __init__(self, trial: TrialInfo, actor: ActorInfo) -> None:
        super().__init__(trial, actor)
        self.rng = np.random.default_rng([trial.seed % 2**63, zlib.crc32(actor.name.encode())])
        self._last: Cell | None = None
        self._last_action = NOOP
        self._stuck = 0  # ticks spent trying to move without moving (a turn costs one)
        self._spot: Cell | None = None  # where it parks while idle; kept, so that two cooks don't dance
        self._goal: frozenset[Cell] = frozenset()  # the targets of the route being walked
        self._path: list[Cell] = []  # the cells of that route still ahead

    def decide(self, observation: np.ndarray) -> int:
        kitchen = Kitchen.parse(observation)
        tried_to_move = self._last_action in STEP_OF_MOVE and kitchen.me == self._last
        self._stuck = self._stuck + 1 if tried_to_move else 0
        self._last = kitchen.me
        if self._stuck >= 3 and self.rng.random() < 0.5:
            action = int(self.rng.integers(0, 4))  # a partner in the way: step aside, at random
        elif (goal := self.goal(kitchen)) is None:
            action = self.park(kitchen)
        else:
            self._spot = None
            action = self.move_towards(kitchen, *goal)
        self._last_action = action
        return action

    def goal(self, k: Kitchen) -> tuple[set[Cell], bool] | None:
        """The cells to face next and whether to wait there rather than interact;
        ``None`` when there is nothing useful to do."""
        cooking = [p for p in k.pots if p.cooking]
        ready = [p for p in k.pots if p.ready]
        open_pots = [p for p in k.pots if p.open]
        partner_serves = any(held in ("plate", "onion_soup") for _, held in k.partners)
        onions_needed = sum(3 - p.onions for p in open_pots) - sum(held == "onion" for _, held in k.partners)
        match k.holding:
            case "onion_soup" | "tomato_soup":
                return k.cells("delivery_zone"), False
            case "plate" if ready:
                return {p.cell for p in ready}, False
            case "plate" if cooking:
                return {p.cell for p in cooking}, True
            case "plate" if open_pots:
                return None  # a soup is on its way: keep the dish, out of the way
            case "onion" if open_pots:
                return {p.cell for p in open_pots}, False
            case None if (ready or cooking) and not partner_serves:
                return k.cells("plate", "plate_stack"), False
            case None if onions_needed > 0:
                return k.cells("onion", "onion_stack"), False
            case None if open_pots and not partner_serves:
                return k.cells("plate", "plate_stack"), False  # fetch the dish while the partner fills the pot
            case None:
                return None
        # Holding something nothing needs now (a surplus onion): put it down on a
        # free counter so the hands are free.
        return k.free_counters, False

    def move_towards(self, k: Kitchen, targets: set[Cell], wait: bool) -> int:
        if k.facing in targets:
            return NOOP if wait else INTERACT
        adjacent = sorted(t for t in targets if _distance(k.me, t) == 1)
        if adjacent:  # turning is moving into a cell one cannot enter
            return MOVE_OF_STEP[_step(k.me, adjacent[0])]
        partners = {pos for pos, _ in k.partners}
        # Keep to the route chosen: replanning every tick around a moving partner
        # makes two cooks mirror each other forever in a corridor.
        if self._path and self._path[0] == k.me:
            self._path.pop(0)
        replan = (
            frozenset(targets) != self._goal
            or not self._path
            or _distance(k.me, self._path[0]) != 1
            or self._path[0] in k.blocked
            # Head to head with a partner, only one of the two should turn back: toss a coin.
            or (self._path[0] in partners and self._stuck >= 2 and self.rng.random() < 0.5)
        )
        if replan:
            self._goal = frozenset(targets)
            self._path = _path(k.me, targets, k.blocked | partners) or _path(k.me, targets, k.blocked) or []
        return MOVE_OF_STEP[_step(k.me, self._path[0])] if self._path else NOOP

    def park(self, k: Kitchen) -> int:
        """Go and stand where the partner is least in the way: not in front of a
        pot, as far from the partner as the kitchen allows."""
        partners = [pos for pos, _ in k.partners]
        pots = {p.cell for p in k.pots}
        reachable = _reachable(k.me, k.blocked | set(partners))

        def score(cell: Cell) -> tuple[int, int, Cell]:
            in_front_of_pot = any(n in pots for n in _neighbours(cell))
            distance = min((_distance(cell, p) for p in partners), default=0)
            return (-int(in_front_of_pot), distance, cell)

        if self._spot not in reachable:
            self._spot = max(reachable, key=score)
        if self._spot == k.me:
            return NOOP
        path = _path(k.me, {self._spot}, k.blocked | set(partners), stand_on=True)
        return MOVE_OF_STEP[_step(k.me, path[0])] if path else NOOP


def _distance(a: Cell, b: Cell) -> int:
    return abs(a[0] - b[0]) + abs(a[1] - b[1])


def _step(a: Cell, b: Cell) -> tuple[int, int]:
    return (b[0] - a[0], b[1] - a[1])


def _neighbours(cell: Cell) -> Iterable[Cell]:
    for dr, dc in STEP_OF_DIRECTION:
        yield (cell[0] + dr, cell[1] + dc)


def _path(start: Cell, targets: set[Cell], blocked: set[Cell], *, stand_on: bool = False) -> list[Cell] | None:
    """A shortest walk (the cells after ``start``) to a free cell next to a target,
    or onto one with ``stand_on``."""
    previous: dict[Cell, Cell | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        arrived = cell in targets if stand_on else any(n in targets for n in _neighbours(cell))
        if cell != start and arrived:
            path = []
            while cell != start:
                path.append(cell)
                cell = previous[cell]
            return path[::-1]
        for n in _free_neighbours(cell, blocked):
            if n not in previous:
                previous[n] = cell
                queue.append(n)
    return None


def _reachable(start: Cell, blocked: set[Cell]) -> set[Cell]:
    seen, queue = {start}, deque([start])
    while queue:
        for n in _free_neighbours(queue.popleft(), blocked):
            if n not in seen:
                seen.add(n)
                queue.append(n)
    return seen


def _free_neighbours(cell: Cell, blocked: set[Cell]) -> Iterable[Cell]:
    rows, cols = Kitchen.GRID
    for n in _neighbours(cell):
        if n not in blocked and 0 <= n[0] < rows and 0 <= n[1] < cols:
            yield n
