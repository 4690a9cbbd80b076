"""Rock-paper-scissors for two players (the seeds' first demo).

Each tick both players pick a move; the winner of the round gets +1, the loser
-1. The trial ends when one player reaches ``target_score`` (config, default 5)
or at the spec's max_ticks. The "player" class's schemas are in
``examples/rps/observation.avsc`` and ``examples/rps/spec.yaml``.
"""

from __future__ import annotations

from trialog.environment import Environment, Step

MOVES = ("ROCK", "PAPER", "SCISSORS")
BEATS = {"ROCK": "SCISSORS", "PAPER": "ROCK", "SCISSORS": "PAPER"}


class RockPaperScissors(Environment):
    def start(self):
        names = self.trial.actor_names
        if len(names) != 2:
            raise ValueError(f"rock-paper-scissors needs exactly 2 players, got {len(names)}")
        self.players = names
        self.score = dict.fromkeys(names, 0)
        self.last: dict[str, str | None] = dict.fromkeys(names, None)
        self.round = 0
        self.target = int(self.trial.config.get("target_score", 5))
        return self._observations()

    def _observations(self):
        a, b = self.players
        return {
            a: {
                "round": self.round,
                "my_score": self.score[a],
                "their_score": self.score[b],
                "their_last_move": self.last[b],
            },
            b: {
                "round": self.round,
                "my_score": self.score[b],
                "their_score": self.score[a],
                "their_last_move": self.last[a],
            },
        }

    def update(self, actions):
        a, b = self.players
        move_a, move_b = actions[a], actions[b]
        rewards = {a: 0.0, b: 0.0}
        if BEATS[move_a] == move_b:
            self.score[a] += 1
            rewards = {a: 1.0, b: -1.0}
        elif BEATS[move_b] == move_a:
            self.score[b] += 1
            rewards = {a: -1.0, b: 1.0}
        self.last = {a: move_a, b: move_b}
        self.round += 1
        done = max(self.score.values()) >= self.target
        return Step(
            observations=self._observations(), rewards=rewards, terminated=dict.fromkeys(self.players, done), done=done
        )
