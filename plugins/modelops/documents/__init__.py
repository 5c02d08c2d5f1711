"""Documents the platform's parts share through the object store: ``routes`` (which versions of a
model serve, and the canary split) is written by the release and read by the gateways, the
reconciler, the canary and the cockpit. Pure: no I/O, no import of the parts that read them."""
