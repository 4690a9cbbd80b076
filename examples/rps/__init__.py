"""Rock-paper-scissors: the game (game.py), its players (players.py), its spec (spec.yaml)."""
