"""Subscribing to engines' KV cache event streams (vLLM's ZMQ PUB) for precise routing.

The I/O half of precise mode: one ZMQ SUB socket per member, its replays and its
connection state, feeding the routing core's `kv_stream.KVEventsFollower`. It
belongs to no front: the router uses it, and so can any other front over the
routing core (the EPP), given a follower and the members' endpoints.
"""

from prefixroute.kv_subscriber.fleet import EventEndpoints, KVEventsSubscriber

__all__ = ["EventEndpoints", "KVEventsSubscriber"]
