# Test stand-in for the official prom/prometheus image (no registry here): Debian 12's prometheus (2.42),
# run like the official image: the binary as entrypoint (the compose file's command gives its flags),
# user nobody, its state in /prometheus (a volume), wget for the health check.
# The package's service is never started (policy-rc.d).
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
RUN printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d \
    && apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus wget \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /prometheus && chown nobody:nogroup /prometheus
USER nobody
WORKDIR /prometheus
ENTRYPOINT ["/usr/bin/prometheus"]
