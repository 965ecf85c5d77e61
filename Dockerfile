# syntax=docker/dockerfile:1
# The one prefixroute image: `prefixroute operator`, `prefixroute router` and
# `prefixroute engine-sim` are its entry points (the pod's args pick one).
# Linted by tests/chart/test_dockerfile.py (hadolint and Docker's own parser).

# Build stage: turn the source and its dependencies into wheels (the only stage with
# build machinery; a dependency without a wheel for this platform is compiled here).
FROM python:3.11.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[fast]"

# Final stage: exactly those wheels, installed into a plain slim Python by file name
# (no index, no compilers, no pip cache), and a numeric non-root user.
FROM python:3.11.11-slim-bookworm
LABEL org.opencontainers.image.title="prefixroute" \
      org.opencontainers.image.description="Prefix-aware routing and operator for LLM model servers" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index /wheels/*.whl \
 && useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin prefixroute
# Numeric user so Kubernetes can verify runAsNonRoot without a passwd lookup.
USER 65532:65532
ENTRYPOINT ["prefixroute"]
CMD ["--help"]
