# Test stand-in for the official redis image (no registry here): Debian 12's redis-server (7.0), run
# like the official image: `redis-server` on PATH (the compose file's command gives its flags), user
# redis, working directory /data, redis-cli for the health check. The package's service is never
# started (policy-rc.d).
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
RUN printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d \
    && apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server redis-tools \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /data && chown redis:redis /data
USER redis
WORKDIR /data
EXPOSE 6379
CMD ["redis-server", "--protected-mode", "no"]
