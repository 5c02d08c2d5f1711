"""``explain=true``: Shapley sampling over a model's inputs, scored by the version that answered."""
