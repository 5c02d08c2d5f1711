# Test stand-in for the official prom/pushgateway image (no registry here): Debian 12's
# prometheus-pushgateway (1.4),
# run like the official image: the binary as entrypoint (the compose file's command gives its flags),
# user nobody, its state in /pushgateway (a volume), wget for the health check.
# The package's service is never started (policy-rc.d).
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
RUN printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d \
    && apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus-pushgateway wget \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /pushgateway && chown nobody:nogroup /pushgateway
USER nobody
WORKDIR /pushgateway
ENTRYPOINT ["/usr/bin/prometheus-pushgateway"]
