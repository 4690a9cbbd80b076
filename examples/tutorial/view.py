"""What people's pages draw of a game of tug of war: the spec names this function (`view:`)."""


def draw(game):
    """game: the TugOfWar being played. Returns a small JSON-able mapping, logged every tick."""
    return {
        "kind": "tug",
        "knot": game.knot,  # positive: towards the first player
        "players": [game.first, game.second],
        "stamina": dict(game.stamina),
        "pulls": dict(game.pulls),  # what each pulled on the last tick
    }
