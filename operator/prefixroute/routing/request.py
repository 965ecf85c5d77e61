"""A request as the routing core sees it: its block hashes, length, tenant and adapter.

A LoRA adapter changes every layer's output, so the KV blocks an engine computes for a
prompt under adapter A are of no use to the base model or to adapter B (vLLM mixes the
adapter into its block hashes). The keys say so too: approximate keys are salted with
the adapter, precise keys carry it in the first block's seed (`token_blocks.first_seed`),
so a prefix routed for A never counts as cached for anything else."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prefixroute.routing import blocks, canonical, token_blocks
from prefixroute.routing.config import RoutingConfig

Tokenizer = Callable[[str], Sequence[int]]


@dataclass(frozen=True, slots=True)
class RoutingRequest:
    blocks: tuple[int, ...]  # chained hashes of the full blocks, in order
    key: int  # the affinity key: hash of the first K blocks (or of the whole short prompt)
    units: int  # prompt length in the units blocks are cut in (characters or tokens)
    tenant: str | None = None
    # A hash of the whole prompt, the partial last block included: the affinity key of
    # last resort, when every full block is a prefix that nearly every request shares.
    whole: int = 0
    adapter: str | None = None  # the LoRA adapter it asks for (None: the base model)


def key_salt(tenant: str | None, adapter: str | None) -> str | None:
    """The first block's salt: the tenant's (isolation on) and the adapter's. A tenant alone
    salts as before; an adapter adds a part no tenant name can hold (a NUL, which no HTTP
    header or API key file carries), so tenant T's base-model keys never equal anyone's
    adapter keys, and adapters A and B never share one."""
    if adapter is None:
        return tenant
    return f"{tenant or ''}\x00lora\x00{adapter}"


def routing_request(
    prefix: str | Sequence[int],
    config: RoutingConfig,
    tenant: str | None = None,
    tokenizer: Tokenizer | None = None,
    adapter: str | None = None,
) -> RoutingRequest:
    """Hash a canonical prefix into a routing request under `config` (`adapter`: the LoRA
    adapter it asks for, None for the base model)."""
    units: str | Sequence[int] = prefix
    if tokenizer is not None and isinstance(prefix, str):
        units = tokenizer(prefix)
    salt = key_salt(tenant if (config.isolate_tenants and tenant) else None, adapter)
    hashes = blocks.chained_hashes(units, config.block_size, salt)
    if hashes:
        key = hashes[min(config.prefix_blocks, len(hashes)) - 1]
        whole = blocks.tail_key(units[len(hashes) * config.block_size :], None, seed=hashes[-1])
    else:
        key = whole = blocks.tail_key(units, salt)
    return RoutingRequest(tuple(hashes), key, len(units), tenant, whole, adapter)


def request_from_body(
    kind: str,
    body: Mapping[str, Any],
    config: RoutingConfig,
    tenant: str | None = None,
    tokenizer: Tokenizer | None = None,
    adapter: str | None = None,
) -> RoutingRequest:
    """Canonicalise a completion ('completion') or chat completion ('chat') body and hash it."""
    prefix = canonical.request_prefix(kind, body, normalised=config.normalise)
    return routing_request(prefix, config, tenant, tokenizer, adapter)


def request_from_tokens(
    tokens: Sequence[int],
    config: RoutingConfig,
    model: str,
    adapter: str | None = None,
    cache_salt: str | None = None,
    tenant: str | None = None,
) -> RoutingRequest:
    """A routing request keyed as the engine caches it (precise mode): the engine's token
    ids in the engine's blocks (`config.block_size` tokens), model, adapter and cache_salt
    in the first block's seed — the keys its KV events are translated to."""
    seed = token_blocks.first_seed(model, adapter, cache_salt)
    hashes = token_blocks.chain(tokens, config.block_size, seed)
    if hashes:
        key = hashes[min(config.prefix_blocks, len(hashes)) - 1]
        whole = token_blocks.tail_key(tokens[len(hashes) * config.block_size :], hashes[-1])
    else:
        key = whole = token_blocks.tail_key(tokens, seed)
    return RoutingRequest(tuple(hashes), key, len(tokens), tenant, whole, adapter)
