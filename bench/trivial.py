"""The benchmark's trivial world: an environment and an agent that cost next to nothing,
so that what is measured is Trialog and Kafka, not user code.

The environment stamps every observation with its own clock (``t_ns``,
nanoseconds): the time between the observations of tick t and t+1 is one full
tick — two Kafka hops, the actors' decisions and the runtime's work — measured on
one clock, with a resolution Kafka's millisecond timestamps do not have.
"""

from __future__ import annotations

import time

from trialog.actor import Agent
from trialog.environment import Environment, Step


class TrivialEnv(Environment):
    def start(self):
        self.tick = 0
        return self._observations()

    def _observations(self):
        now = time.time_ns()
        return {name: {"tick": self.tick, "t_ns": now} for name in self.trial.actor_names}

    def update(self, actions):
        self.tick += 1
        return Step(observations=self._observations())


class EchoAgent(Agent):
    def decide(self, observation):
        return {"tick": observation["tick"]}
