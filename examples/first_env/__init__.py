"""Guess the number: a two-player game written from scratch, its spaces declared with
Gymnasium spaces and no Avro written by hand (docs/environments.md, "Your own environment
with Gymnasium spaces")."""
