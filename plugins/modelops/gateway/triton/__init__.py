"""Talking to Triton: the gateway's HTTP/1.1 inference client and its pool of servers."""
