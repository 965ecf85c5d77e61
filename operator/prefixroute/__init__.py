"""prefixroute: route each LLM request to the replica that already holds its prompt prefix."""

# The one place the version is written. pyproject.toml reads it from here; Chart.yaml and
# manifests/base need a literal of their own (tests/test_version.py checks that they agree);
# the image's label gets it as a build argument (Dockerfile).
__version__ = "0.1.0"
