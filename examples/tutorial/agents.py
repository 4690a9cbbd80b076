"""An agent for tug of war that plays to win and is a good sport about it."""

from trialog.actor import Agent
from trialog.examples.tutorial.game import HARDEST, LINE, STAMINA


class GoodSport(Agent):
    """Rests while the other player tires, pulls just harder than they can once they are
    tired, and everything it has when one step from losing; when they win a pull, it cheers
    them on with a small reward and a message."""

    def __init__(self, trial, actor):
        super().__init__(trial, actor)
        self.other = next(name for name in trial.actor_names if name != actor.name)
        self.knot = 0
        self.tick = -1

    def decide(self, observation):  # once per tick, in order
        self.tick += 1
        knot, mine, theirs = observation["knot"], observation["stamina"], observation["their_stamina"]
        if knot < self.knot:  # the knot moved their way: they out-pulled me on the last tick
            self.reward(self.other, 0.1, tick=self.tick - 1)
            self.message([self.other], {"says": "good pull!"})
        self.knot = knot
        if mine > theirs and theirs < HARDEST:
            return theirs + 1  # more than they can pull: this step is mine
        if knot <= 1 - LINE:
            return min(mine, HARDEST)  # one step from losing: everything I have
        if mine < STAMINA:
            return 0  # rest while they tire
        return 1
