"""Whether a hub model's routers have its tokenizer, from the routers' own word (pure).

A vLLM model named by hub id is routed precisely by default: each router fetches the model's
tokenizer files from the hub with the engine's HF_TOKEN (controller/precise.py). The operator
fetches nothing itself and holds no token; the routers say on /metrics whether they key by
the tokenizer yet and why their latest attempt failed (`router_figures`). While a ready router
reports a failure, the model is Degraded, reason TokenizerUnavailable, with what to fix; the
routers serve meanwhile (approximately) and keep trying, and once they report the tokenizer
the condition clears. They try with the token they started with: a container reads a Secret's
value into its env once, when it starts, so a changed Secret reaches them when they restart
(the unauthorized message says so), while access granted on the hub reaches them as they
are. A problem with the spec or its objects (InvalidSpec, ApplyFailed, ...)
or the API-key Secret is reported first: this one never replaces it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from prefixroute.controller.conditions import DEGRADED, condition, raised, reported_degraded
from prefixroute.controller.errors import SpecError
from prefixroute.controller.precise import precise_routing, tokenizer_hub
from prefixroute.controller.router_figures import RouterFigures
from prefixroute.controller.spec.model import ModelSpec

REASON = "TokenizerUnavailable"
RECHECK_SECONDS = 10.0  # how often the models loop reads a hub model's routers

_FIX = {
    "unauthorized": "the hub refused the token: the model is gated or private; give spec.engine.env an HF_TOKEN "
    "(valueFrom.secretKeyRef) of an account that was granted access (a pod reads a Secret's value into its env "
    "when it starts: after changing the Secret, `kubectl rollout restart` the model's router Deployment)",
    "not_found": "the hub has no such repository or revision: check spec.engine.model and --revision",
    "unreachable": "the router pods cannot reach the hub (an egress policy, a proxy, HF_ENDPOINT in spec.engine.env)",
    "invalid": "the repository's tokenizer files cannot be read",
}


def hub_tokenizer(spec: ModelSpec | None) -> str | None:
    """The hub id the routers fetch a tokenizer for, or None (approximate, a folder, engine-sim)."""
    if spec is None:
        return None
    try:
        precise = precise_routing(spec.engine, spec.routing, tokenizer_hub(spec.model))
    except SpecError:
        return None  # the reconcile reports it
    return precise.tokenizer if precise is not None and precise.from_hub else None


def problem(tokenizer: str, routers: Iterable[RouterFigures]) -> str | None:
    """Why routers lack the tokenizer, or None while none of those that answered reports a failure."""
    answered = [r for r in routers if r.tokenizer_ready is not None]
    failing = [r.tokenizer_failing for r in answered if not r.tokenizer_ready and r.tokenizer_failing]
    if not failing:
        return None
    reason = max(set(failing), key=failing.count)
    fix = _FIX.get(reason, f"the routers report {reason}")
    return (
        f"{len(failing)} of {len(answered)} router(s) cannot fetch the tokenizer of {tokenizer} from the hub "
        f"({reason}): {fix}; they route approximately meanwhile and keep trying"
    )


def degraded_for(problem: str | None, previous: Mapping[str, Any] | None, generation: int) -> dict[str, Any] | None:
    """The Degraded condition the routers' reports ask for: TokenizerUnavailable while there is a
    problem, back to Reconciled once one that was reported is gone; None: leave it as is."""
    return reported_degraded(REASON, problem, previous, generation, "the routers key requests by the model's tokenizer")


def kept(previous: Mapping[str, Any] | None, spec: ModelSpec, generation: int) -> dict[str, Any] | None:
    """For a reconcile that knows nothing new of the routers: the TokenizerUnavailable condition
    to keep, while the spec still has them fetch a hub tokenizer (None: nothing to keep)."""
    old = raised(previous, REASON)
    if old is None or hub_tokenizer(spec) is None:
        return None
    return condition(DEGRADED, True, REASON, str(old.get("message", "")), generation)
