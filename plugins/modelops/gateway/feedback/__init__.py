"""``POST /v1/feedback``: signed feedback tokens and the outcomes a model declares."""
