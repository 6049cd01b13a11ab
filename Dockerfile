# Dockerfile -- fairq-proxy as a sidecar image: built with the project's CMake on Debian bookworm, run as a non-root user.
#
#   docker build -t fairq .
#   docker run -v "$PWD/config/fairq.yaml:/etc/fairq/fairq.yaml:ro" \
#              -e FAIRQ_NATS_URL=nats://nats:4222 -e FAIRQ_HTTP_LISTEN=0.0.0.0:9464 -p 9464:9464 fairq
#
# The image also carries the example producer and worker, so docker-compose.yml
# runs every service from this one image, and fairq-admin for the admin requests:
#   docker-compose -p fairq exec fairq fairq-admin --nats nats://admin:admin-demo-password@nats:4222 \
#     --inbox-prefix _INBOX_admin stats '{"limit":20}'
#
# Built and started for real by scripts/container.sh (make container-test); docs/container.md.

# ---- build: the same install script and CMake as `make build` ----
FROM debian:bookworm-slim AS build
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*
# What the build reads, not the whole context: a change to docs or scripts
# keeps the cached build (tests/ because CMakeLists.txt declares the tests).
COPY CMakeLists.txt ./
COPY lib lib
COPY cmd cmd
COPY tests tests
RUN cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFAIRQ_WERROR=ON \
 && cmake --build build -j "$(nproc)" --target fairq-proxy fairq-admin fairq-producer fairq-worker
# The label lets scripts/container.sh prune this stage's image (it tags it fairq:build) once a newer build replaces it.
LABEL org.opencontainers.image.title=fairq

# ---- runtime: the shared libraries only (apt adds what they depend on) ----
FROM debian:bookworm-slim AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libnats3.4 libcjson1 libcyaml1 libmicrohttpd12 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin fairq
COPY --from=build /src/build/fairq-proxy /src/build/fairq-admin /src/build/fairq-producer \
     /src/build/fairq-worker /usr/local/bin/
# A default config; mount yours over it (docker-compose.yml mounts config/fairq.yaml).
COPY config/fairq.yaml /etc/fairq/fairq.yaml
LABEL org.opencontainers.image.title=fairq
USER fairq:fairq
# Metrics and probes: set http.listen (or FAIRQ_HTTP_LISTEN) to 0.0.0.0:9464 to reach them from outside.
EXPOSE 9464
# bookworm-slim has no curl or wget: the proxy probes itself.
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
  CMD ["fairq-proxy", "--health", "http://127.0.0.1:9464/healthz"]
ENTRYPOINT ["fairq-proxy"]
CMD ["-c", "/etc/fairq/fairq.yaml"]
