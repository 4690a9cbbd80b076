"""A scripted rock-paper-scissors player: a stand-in for a person ("pseudo-human").

Config ``move``: always play this move; without it, play what beats the
opponent's last move (rock on the first round).
"""

from __future__ import annotations

from trialog.actor import Agent

COUNTER = {"ROCK": "PAPER", "PAPER": "SCISSORS", "SCISSORS": "ROCK"}


class CounterPlayer(Agent):
    def decide(self, observation):
        fixed = self.actor.config.get("move")
        if fixed:
            return str(fixed).upper()
        last = observation["their_last_move"]
        return COUNTER[last] if last else "ROCK"
