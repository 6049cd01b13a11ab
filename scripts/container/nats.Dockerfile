# nats.Dockerfile -- a NATS image from Debian's nats-server (2.9.10), for machines that reach Debian's mirror but no image registry.
#
# scripts/container.sh builds it FROM the offline debian:bookworm-slim and
# runs docker-compose.yml with FAIRQ_NATS_IMAGE naming it; elsewhere the
# compose file uses the official nats:2.9.10-alpine. wget is for the compose
# healthcheck, as busybox's is in the alpine image.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends nats-server wget \
 && rm -rf /var/lib/apt/lists/*
LABEL org.opencontainers.image.title=fairq-nats
EXPOSE 4222 8222
CMD ["nats-server", "-js", "-sd", "/data", "-m", "8222"]
