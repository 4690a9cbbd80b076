"""Environments for the environment conformance suite's own test."""

from trialog.environment import Step
from trialog.examples.rps.game import RockPaperScissors


class LopsidedRps(RockPaperScissors):
    """Rock-paper-scissors that pays double: it follows the protocol, but it is not the game."""

    def update(self, actions):
        step = super().update(actions)
        rewards = {name: 2 * value for name, value in step.rewards.items()}
        return Step(observations=step.observations, rewards=rewards, terminated=step.terminated, done=step.done)
