"""What the edge speaks: each model's compiled contract, the request forms, the Open Inference Protocol, OpenAPI."""
