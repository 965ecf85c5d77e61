"""prefixroute: route each LLM request to the replica that already holds its prompt prefix."""

__version__ = "0.1.0"
