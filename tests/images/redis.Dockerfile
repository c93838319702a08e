# Redis from Debian's redis-server package, for clusters that cannot pull the chart's
# default image (docker.io/library/redis). It runs the way the chart runs the official
# image: the container's args are redis-server's (the chart passes /etc/redis/redis.conf,
# mounted from a ConfigMap), as uid 10002 with a read-only root file system, data in /data;
# the readiness probe calls `sh -c "redis-cli … | grep …"`, all of which Debian provides.
#   docker build -f tests/images/redis.Dockerfile -t localhost/lockgate-test/redis:7 tests/images
# Chart values to use it: redis.image.repository=localhost/lockgate-test/redis,
# redis.image.tag=7, redis.image.pullPolicy=Never (docs/install.md).
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
# Debian's package creates its own `redis` user and /var/lib/redis; neither is used here.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
 && mkdir -p /data && chown 10002:10002 /data \
 && redis-server --version
WORKDIR /data
USER 10002:10002
EXPOSE 6379
ENTRYPOINT ["/usr/bin/redis-server"]
