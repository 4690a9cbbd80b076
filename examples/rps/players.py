"""A random rock-paper-scissors player, reproducible from the trial seed."""

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
