"""Guess the number: each tick both players guess a secret number from 1 to 100 and each
hears whether their own guess was too low or too high; whoever finds it first gets 1."""

import numpy as np
from gymnasium import spaces

from trialog.actor import Agent
from trialog.adapters.declared import SpacesEnvironment
from trialog.environment import Step

LOW, HIGH = 1, 100
NONE_YET, TOO_LOW, TOO_HIGH, FOUND = range(4)


class GuessTheNumber(SpacesEnvironment):
    observation_spaces = {
        "guesser": spaces.Dict(
            {
                "hint": spaces.Discrete(4),  # about my last guess: none yet, too low, too high, found
                "bounds": spaces.Box(LOW, HIGH, shape=(2,), dtype=np.int64),  # where the number still may be
            }
        )
    }
    action_spaces = {"guesser": spaces.Discrete(HIGH - LOW + 1, start=LOW)}

    def start(self):
        self.secret = int(np.random.default_rng(self.trial.seed).integers(LOW, HIGH + 1))
        self.bounds = {name: (LOW, HIGH) for name in self.trial.actor_names}
        return {name: self.observe(name, NONE_YET) for name in self.trial.actor_names}

    def update(self, actions):
        hints = {}
        for name, guess in actions.items():
            low, high = self.bounds[name]
            if guess < self.secret:
                hints[name], self.bounds[name] = TOO_LOW, (max(low, guess + 1), high)
            elif guess > self.secret:
                hints[name], self.bounds[name] = TOO_HIGH, (low, min(high, guess - 1))
            else:
                hints[name], self.bounds[name] = FOUND, (guess, guess)
        found = [name for name, hint in hints.items() if hint == FOUND]
        return Step(
            observations={name: self.observe(name, hint) for name, hint in hints.items()},
            rewards={name: 1.0 for name in found},
            done=bool(found),
        )

    def observe(self, name, hint):
        return {"hint": hint, "bounds": np.array(self.bounds[name])}


class Bisect(Agent):
    """Guesses the middle of what is left: finds any number in 7 guesses."""

    def decide(self, observation):
        low, high = observation["bounds"]
        return int(low + high) // 2
