# flowd: `flow` (CLI and server) and `flow-llm`, with python3 and the
# examples so the example Tools run (docs/deploy.md).

FROM rust:1.95-slim-bookworm AS build
# aws-lc-sys (rustls in flow-llm) builds C; cmake covers its older paths.
RUN apt-get update \
 && apt-get install -y --no-install-recommends cmake \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p flowd -p flow-llm --bins \
 && strip target/release/flow target/release/flow-llm

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --create-home --home-dir /var/lib/flowd flowd
COPY --from=build /src/target/release/flow /src/target/release/flow-llm /usr/local/bin/
# The example Tools find the Python toolkit at ../../../toolkits/python.
COPY examples /opt/flowd/examples
COPY toolkits /opt/flowd/toolkits
USER flowd
WORKDIR /var/lib/flowd
EXPOSE 8080
ENTRYPOINT ["flow"]
CMD ["serve", "--listen", "0.0.0.0:8080", "--insecure"]
