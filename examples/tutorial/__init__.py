"""Tug of war: the game of docs/tutorial.md ("Your first environment, agent and page"),
written from scratch with Gymnasium spaces, with an agent, a view and a page of its own."""
