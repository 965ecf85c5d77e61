# syntax=docker/dockerfile:1
# The one prefixroute image: `prefixroute operator`, `prefixroute router` and
# `prefixroute engine-sim` are its entry points (the pod's args pick one).
# Linted by tests/chart/test_dockerfile.py (hadolint and Docker's own parser).
#
# VERSION is the package's version (operator/prefixroute/__init__.py, the one place it is
# written), for the image's label; the build fails when it is missing or differs:
#   docker buildx build --build-arg VERSION=X.Y.Z -t prefixroute/prefixroute:X.Y.Z .

# Native stage: the compiled parts (native/, Rust: the KV event reader, the EPP's ext_proc
# server) as an abi3 wheel for CPython 3.11+, built by maturin (compiled here from crates.io at
# the version scripts/setup.sh's pip uses); an abi3 wheel needs no Python interpreter to build.
FROM rust:1.86.0-slim-bookworm AS native
RUN cargo install --locked maturin --version 1.16.0
WORKDIR /native
COPY native/Cargo.toml native/Cargo.lock native/pyproject.toml native/prefixroute_native.pyi ./
COPY native/src ./src
RUN maturin build --release --out /wheels

# Build stage: turn the source and its dependencies into wheels (the only stage with
# build machinery; a dependency without a wheel for this platform is compiled here).
FROM python:3.11.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
COPY --from=native /wheels /wheels
ARG VERSION
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[fast]" \
 && if [ ! -f "/wheels/prefixroute-${VERSION:?build with --build-arg VERSION=<the package version>}-py3-none-any.whl" ]; then \
        echo "VERSION=$VERSION is not the package's version:" /wheels/prefixroute-*.whl >&2; exit 1; \
    fi

# Final stage: exactly those wheels, installed into a plain slim Python by file name
# (no index, no compilers, no pip cache), and a numeric non-root user.
FROM python:3.11.11-slim-bookworm
ARG VERSION
LABEL org.opencontainers.image.title="prefixroute" \
      org.opencontainers.image.description="Prefix-aware routing and operator for LLM model servers" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# xds-protos (the EPP's Envoy messages) ships its own, older copy of OpenTelemetry's protos
# under the same file names as opentelemetry-proto (the tracing exporter's), and whichever
# wheel pip unpacks last wins: with xds-protos' copy the OTLP exporter does not import.
# Envoy's messages load with the newer copy, so opentelemetry-proto's wheel is unpacked again
# on top, and one process importing both proves the image (as scripts/setup.sh does).
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index /wheels/*.whl \
 && pip install --no-cache-dir --no-index --no-deps --force-reinstall /wheels/opentelemetry_proto-*.whl \
 && python -c "import envoy.service.ext_proc.v3.external_processor_pb2, opentelemetry.exporter.otlp.proto.http.trace_exporter" \
 && useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin prefixroute
# Numeric user so Kubernetes can verify runAsNonRoot without a passwd lookup.
USER 65532:65532
ENTRYPOINT ["prefixroute"]
CMD ["--help"]
