"""The model release: candidate, contract gate, publishing (first half) and the canary (second half)."""
