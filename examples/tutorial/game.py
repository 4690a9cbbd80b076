"""Tug of war: two players pull a rope. Each tick both choose how hard to pull, from 0 to 3,
paid from their stamina (a tick of rest gives 1 back). The knot moves one step towards
whoever pulled harder; pull it over your line, 3 steps your way, and you win."""

import importlib

from gymnasium import spaces

from trialog.adapters.declared import SpacesEnvironment
from trialog.environment import Step

LINE = 3  # steps from the middle to each player's line
STAMINA = 6  # the most stamina a player holds
HARDEST = 3  # the hardest pull


class TugOfWar(SpacesEnvironment):
    observation_spaces = {
        "puller": spaces.Dict(
            {
                "knot": spaces.Discrete(2 * LINE + 1, start=-LINE),  # where the knot is; positive: my way
                "stamina": spaces.Discrete(STAMINA + 1),
                "their_stamina": spaces.Discrete(STAMINA + 1),
            }
        )
    }
    action_spaces = {"puller": spaces.Discrete(HARDEST + 1)}  # how hard to pull: 0 (rest) to 3
    CODE_KEYS = ("view",)  # config keys naming code: taken from the operator's spec, never a request

    def start(self):
        self.first, self.second = self.trial.actor_names
        self.knot = 0  # positive: towards the first player
        self.stamina = {name: STAMINA for name in self.trial.actor_names}
        self.pulls = {name: 0 for name in self.trial.actor_names}
        view = self.trial.config.get("view")  # "package.module:function", for people's pages
        module, _, function = (view or "").partition(":")
        self.draw = getattr(importlib.import_module(module), function) if view else None
        return {name: self.observe(name) for name in self.trial.actor_names}

    def update(self, actions):
        for name in self.trial.actor_names:
            pull = min(int(actions.get(name, 0)), self.stamina[name])  # no stamina, no pull
            self.stamina[name] += 1 if pull == 0 else -pull
            self.stamina[name] = min(self.stamina[name], STAMINA)
            self.pulls[name] = pull
        harder = self.pulls[self.first] - self.pulls[self.second]
        self.knot += (harder > 0) - (harder < 0)
        winner = self.first if self.knot >= LINE else self.second if self.knot <= -LINE else None
        return Step(
            observations={name: self.observe(name) for name in self.trial.actor_names},
            rewards={} if winner is None else {n: 1.0 if n == winner else -1.0 for n in self.trial.actor_names},
            done=winner is not None,
        )

    def observe(self, name):
        other = self.second if name == self.first else self.first
        knot = self.knot if name == self.first else -self.knot
        return {"knot": knot, "stamina": self.stamina[name], "their_stamina": self.stamina[other]}

    def view(self):
        return self.draw(self) if self.draw else None
