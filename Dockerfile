# syntax=docker/dockerfile:1
# The one prefixroute image: `prefixroute operator`, `prefixroute router` and
# `prefixroute engine-sim` are its entry points (the pod's args pick one).

# Build stage: turn the source into wheels (the only stage with pip's build machinery).
FROM python:3.11.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[fast]"

# Final stage: the wheels installed into a plain slim Python, no compilers, no pip cache.
FROM python:3.11.11-slim-bookworm
LABEL org.opencontainers.image.title="prefixroute" \
      org.opencontainers.image.description="Prefix-aware routing and operator for LLM model servers" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels prefixroute uvloop \
 && rm -rf /wheels \
 && useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin prefixroute
# Numeric user so Kubernetes can verify runAsNonRoot without a passwd lookup.
USER 10001:10001
ENTRYPOINT ["prefixroute"]
CMD ["--help"]
