"""modelops.traffic: simulated users sending predictions and feedback through the gateway."""
