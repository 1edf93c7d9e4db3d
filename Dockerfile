# hookd's container image: built on Debian bookworm, run on bookworm-slim as a
# user without privileges. No PostgreSQL inside: DATABASE_URL names the database
# (the embedded cluster is for development on a workstation).
#   docker build --build-arg HOOKD_REVISION=$(git rev-parse --short=12 HEAD) -t hookd .
#   docker run -e DATABASE_URL=postgres://… -p 8080:8080 hookd
# The build context has no .git (.dockerignore), so the revision comes from the
# build argument (else --version says "rev unknown").

FROM rust:1.95-bookworm AS build
WORKDIR /src
ARG HOOKD_REVISION=unknown
ENV HOOKD_REVISION=${HOOKD_REVISION}
COPY . .
RUN cargo build --release --locked --bin hookd

FROM debian:bookworm-slim
# The system's certificate authorities: DATABASE_URL with sslmode=verify-full,
# forwards over https, PayPal's certificate downloads.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --user-group --uid 10001 --home-dir /nonexistent \
      --shell /usr/sbin/nologin hookd
COPY --from=build /src/target/release/hookd /usr/bin/hookd
# A server's configuration without secrets (mount your own over it: a
# Kubernetes ConfigMap, a compose volume); secrets come through the *_FILE variables.
COPY deploy/hookd.toml /etc/hookd/hookd.toml
ENV HOOKD_CONFIG=/etc/hookd/hookd.toml \
    HOOKD_LISTEN=0.0.0.0:8080 \
    HOOKD_LOG_FORMAT=json
USER 10001:10001
EXPOSE 8080
# No HEALTHCHECK: the image has no HTTP client to run one, and orchestrators
# probe GET /healthz and /readyz themselves (compose.yaml, deploy/kubernetes).
# SIGTERM is hookd's to handle: it stops in shutdown_delay + shutdown_grace.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/hookd"]
CMD ["serve"]
