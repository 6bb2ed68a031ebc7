# Builds both binaries: `seckill` (the service) and `loadtest` (the goose crowd).
FROM rust:1.95-bookworm AS build
# etcd-client compiles etcd's protobuf definitions at build time.
RUN apt-get update && apt-get install -y --no-install-recommends protobuf-compiler libprotobuf-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --workspace

FROM debian:12.12-slim
COPY --from=build /src/target/release/seckill /src/target/release/loadtest /usr/local/bin/
ENV SECKILL_BIND=0.0.0.0
ENTRYPOINT ["seckill"]
CMD ["serve"]
