"""A tiny environment for the page tests: each tick the player places a bid, an action that
is a record of a bounded number and a boolean (no enum: the generic page builds a form)."""

from trialog.environment import Environment, Step


class Bids(Environment):
    def start(self):
        return {name: {"total": 0} for name in self.trial.actor_names}

    def update(self, actions):
        self.total = getattr(self, "total", 0) + sum(a["amount"] for a in actions.values() if a["confirm"])
        return Step(observations={name: {"total": self.total} for name in actions})
