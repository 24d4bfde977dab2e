# Firn in a container: `docker build -t firn .` at the repository root, then
# `docker run -p 7379:7379 -p 7380:7380 -v firn-data:/data firn` for a single node, or
# deploy/compose.yaml for three. See docs/deploy.md.

# The Rust this was built and tested with here (the workspace needs 1.90 or newer), on the same
# Debian release as the runtime stage, so that the binary finds the glibc it was linked to.
ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=trixie

FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS builder
WORKDIR /src
# The whole workspace: Cargo reads every member's manifest even to build one binary.
# .dockerignore keeps build outputs, data and the git history out of the context.
COPY . .
# Cache mounts (BuildKit) keep the registry and the build folder between builds; the
# binary is copied out of the cached folder, which does not persist into the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin firn \
    && cp target/release/firn /usr/local/bin/firn

FROM debian:${DEBIAN_RELEASE}-slim
# curl: the health check asks the node's /healthz.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends curl ca-certificates \
    && rm -rf /var/lib/apt/lists/*
# A fixed numeric id, so that Kubernetes' runAsNonRoot can check it and a volume can be
# prepared for it (fsGroup 10001 in deploy/k8s).
RUN groupadd --system --gid 10001 firn \
    && useradd --system --uid 10001 --gid firn --home-dir /data --shell /usr/sbin/nologin firn \
    && mkdir -p /data \
    && chown firn:firn /data
COPY --from=builder /usr/local/bin/firn /usr/local/bin/firn

# Settings through the environment (flags and a config file work too, see docs/api.md):
# listen on every interface of the container, keep the data in the volume.
ENV FIRN_DATA_DIR=/data \
    FIRN_RESP_ADDR=0.0.0.0:7379 \
    FIRN_HTTP_ADDR=0.0.0.0:7380 \
    FIRN_PEER_ADDR=0.0.0.0:7381
VOLUME ["/data"]
# RESP (redis-cli), HTTP/JSON, and the other nodes of the cluster.
EXPOSE 7379 7380 7381
USER 10001:10001

# /healthz answers 200 once every shard this node holds has a leader. The port follows
# FIRN_HTTP_ADDR if it is changed (the shell form expands it).
# hadolint ignore=DL3025
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD curl -fsS "http://127.0.0.1:${FIRN_HTTP_ADDR##*:}/healthz" > /dev/null || exit 1

# firn stops gracefully on SIGTERM (docker stop); kill -9 loses nothing acknowledged.
ENTRYPOINT ["/usr/local/bin/firn"]
CMD ["serve"]
