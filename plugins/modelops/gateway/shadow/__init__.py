"""The shadow phase at the edge: mirroring requests to the candidate and comparing its answers."""
