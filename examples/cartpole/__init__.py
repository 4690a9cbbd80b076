"""CartPole (Gymnasium) through the Gymnasium adapter: the spec the learning presets train on."""
