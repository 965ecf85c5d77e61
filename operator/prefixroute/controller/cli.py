"""`prefixroute operator`: run the kopf operator for PrefixRoutedModel resources.

kopf is started programmatically (``kopf.run``) with a registry of our own, so the
operator is one console script in one image, like the router and engine-sim.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import socket
from typing import Any

LIVENESS_PORT = 8081
OFF = ("off", "none", "")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "operator",
        help="the kopf operator for PrefixRoutedModel resources",
        description="Reconcile PrefixRoutedModel resources into engines, a router and a ring.",
    )
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "--namespace",
        "-n",
        action="append",
        dest="namespaces",
        metavar="NS",
        help="watch this namespace (repeat for more; kopf globs like 'team-*' work)",
    )
    scope.add_argument("--all-namespaces", "-A", action="store_true", help="watch every namespace (the default)")
    peering = parser.add_mutually_exclusive_group()
    peering.add_argument(
        "--peering",
        metavar="NAME",
        help="kopf peering object for HA: only the highest-priority replica acts (must exist)",
    )
    peering.add_argument("--standalone", action="store_true", help="no peering: this replica always acts")
    parser.add_argument(
        "--priority",
        type=int,
        default=None,
        help="peering priority of this replica (default with --peering: random, so one replica "
        "acts and the others stand by; kopf freezes replicas of equal priority)",
    )
    parser.add_argument(
        "--liveness",
        metavar="URL",
        default=None,
        help=f"kopf's liveness endpoint (default http://$POD_IP:{LIVENESS_PORT}/healthz, "
        f"or 0.0.0.0 outside a pod; 'off' disables)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve the operator's Prometheus metrics (prefixroute_operator_*) at /metrics on this "
        "port, on $POD_IP (0.0.0.0 outside a pod); off by default",
    )
    parser.add_argument(
        "--prometheus-url",
        metavar="URL",
        default=os.environ.get("PREFIXROUTE_PROMETHEUS_URL") or None,
        help="the Prometheus the autoscaler reads when a resource's spec.autoscaling.prometheus is "
        "unset (default $PREFIXROUTE_PROMETHEUS_URL)",
    )
    parser.add_argument(
        "--dev",
        action="store_true",
        help="local development: standalone, verbose, no liveness endpoint unless --liveness",
    )
    parser.add_argument(
        "--verbose", "-v", action="store_true", help="debug logging, with kopf's line for every event a handler took"
    )
    parser.set_defaults(handler=run)


def bind_host(environ: Any = os.environ) -> str:
    """The pod IP, like every server of ours (docs/contracts.md); 0.0.0.0 outside a pod."""
    return str(environ.get("POD_IP") or "0.0.0.0")


def default_liveness(environ: Any = os.environ) -> str:
    host = bind_host(environ)
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{LIVENESS_PORT}/healthz"


def identity(environ: Any = os.environ, rng: random.Random | None = None) -> str:
    """This replica's name among its peers. kopf's own default asks the password database
    for the user name, which fails for a UID without an entry (our image runs as 65532)."""
    host = environ.get("POD_NAME") or socket.gethostname()
    return f"{host}/{os.getpid()}/{(rng or random.SystemRandom()).getrandbits(32):08x}"


def kopf_options(
    args: argparse.Namespace, environ: Any = os.environ, rng: random.Random | None = None
) -> dict[str, Any]:
    """The keyword arguments for ``kopf.run`` (pure given ``rng``, so tests check every flag)."""
    options: dict[str, Any] = {"identity": identity(environ, rng)}
    if args.namespaces:
        options["namespaces"] = list(args.namespaces)
        options["clusterwide"] = False
    else:
        options["clusterwide"] = True
    if args.peering:
        options["peering_name"] = args.peering
        options["standalone"] = False
    elif args.standalone or args.dev:
        options["standalone"] = True
    if args.priority is not None:
        options["priority"] = args.priority
    elif args.peering:
        options["priority"] = (rng or random.SystemRandom()).randint(1, 1_000_000)
    if args.liveness is not None:
        options["liveness_endpoint"] = None if args.liveness.lower() in OFF else args.liveness
    elif not args.dev:
        options["liveness_endpoint"] = default_liveness(environ)
    return options


def peering_of(options: dict[str, Any]) -> Any:
    """What the models loop needs to follow kopf's peering, from ``kopf_options``' result."""
    from prefixroute.controller.peering import Peering

    identity = str(options["identity"])
    if options.get("standalone"):
        return Peering(identity=identity)
    return Peering(
        identity=identity,
        name=options.get("peering_name") or "default",  # kopf's own default name
        priority=int(options.get("priority") or 0),
        clusterwide=bool(options.get("clusterwide")),
        mandatory="peering_name" in options,  # kopf's default peering is used only if it exists
    )


def run(args: argparse.Namespace) -> int:
    import kopf
    from prometheus_client import disable_created_metrics

    from prefixroute.controller.edge import kube_edge
    from prefixroute.controller.handlers import QuietEventHandlers, build_registry, post_event, prometheus_autoscaler
    from prefixroute.controller.metrics import OperatorMetrics, serve
    from prefixroute.controller.reconcile import Controller

    kopf.configure(verbose=args.verbose or args.dev)
    if not (args.verbose or args.dev):
        logging.getLogger("kopf.objects").addFilter(QuietEventHandlers())
    # A counter's _created series is one more line per model and label set that nothing reads:
    # at 1,000 models a scrape of /metrics was 7,000 lines rendered under the GIL.
    disable_created_metrics()  # type: ignore[no-untyped-call]
    metrics = OperatorMetrics()
    if args.metrics_port is not None:
        serve(metrics.registry, args.metrics_port, bind_host())
    options = kopf_options(args)
    registry = build_registry(
        lambda: Controller(edge=kube_edge(), events=post_event, metrics=metrics),
        lambda controller: prometheus_autoscaler(controller, args.prometheus_url),
        peering_of(options),
    )
    kopf.run(registry=registry, **options)
    return 0
