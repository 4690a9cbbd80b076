"""Rock-paper-scissors players: a random one, reproducible from the trial seed, and a
scripted one, a stand-in for a person ("pseudo-human").
"""

from __future__ import annotations

import zlib

import numpy as np

from trialog.actor import Agent

MOVES = ("ROCK", "PAPER", "SCISSORS")


class RandomPlayer(Agent):
    def __init__(self, trial, actor):
        super().__init__(trial, actor)
        self.rng = np.random.default_rng([trial.seed, zlib.crc32(actor.name.encode())])

    def decide(self, observation):
        return MOVES[int(self.rng.integers(3))]


COUNTER = {"ROCK": "PAPER", "PAPER": "SCISSORS", "SCISSORS": "ROCK"}


class CounterPlayer(Agent):
    """Config ``move``: always play this move; without it, play what beats the opponent's
    last move (rock on the first round)."""

    def decide(self, observation):
        fixed = self.actor.config.get("move")
        if fixed:
            return str(fixed).upper()
        last = observation["their_last_move"]
        return COUNTER[last] if last else "ROCK"
