"""Bring the local Kubernetes control plane up or down, inside its own network namespace.

    python -m e2e.cluster up        # build if needed, start everything, wait until Ready
    python -m e2e.cluster up --runner-nodes   # no KWOK: the pod runner keeps the nodes (the demo)
    python -m e2e.cluster status
    python -m e2e.cluster exec -- kubectl get pods -A     # any command, inside the netns
    python -m e2e.cluster env       # export lines: KUBECONFIG, PATH (kubectl, helm)
    python -m e2e.cluster logs NS/POD [-c CONTAINER] [-f]   # our pods' logs
    python -m e2e.cluster down      # stop every process started, delete the netns

This module is the command line; the parts are ``e2e.layout`` (addresses and files),
``e2e.credentials`` (certificates, kubeconfigs), ``e2e.daemons`` (command lines, start
order), ``e2e.promconfig``, ``e2e.seed`` (nodes, the daemons' RBAC), ``e2e.lifecycle``
(up, down, restart one daemon) and ``e2e.clusterapi`` (kubectl, readiness). See
docs/control-plane.md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys

from e2e import build, clusterapi, credentials, daemon_records, netns
from e2e.layout import Cluster
from e2e.lifecycle import down, print_env, say, up
from prefixroute.processes import ProcessError

__all__ = ["Cluster", "main"]  # Cluster: for callers that name a cluster next to running this command


def status(c: Cluster) -> int:
    recs = daemon_records.load(c.pids)
    say(f"netns {c.name}: {'present' if netns.exists(c.name) else 'absent'}")
    for r in recs:
        say(f"  {r.name:<24} pid {r.pid:<8} {'running' if r.alive() else 'DEAD'}   log {r.log}")
    if not netns.exists(c.name):
        return 1
    netns.enter(c.name)
    healthy = (c.pki / "admin.crt").exists() and clusterapi.api_healthy(c)
    say(f"API server {c.server}: {'ready' if healthy else 'NOT ready'}")
    if healthy:
        say(clusterapi.kubectl(c, "get", "nodes", "-o", "wide", check=False).rstrip())
        version = json.loads(clusterapi.get(c.server + "/version", credentials.admin_tls(c))[1])
        say(f"version: {version.get('gitVersion')}")
    return 0 if healthy and all(r.alive() for r in recs) else 1


def exec_in(c: Cluster, cmd: list[str]) -> int:
    """Replace this process with ``cmd`` run inside the namespace, KUBECONFIG and PATH set."""
    if not netns.exists(c.name):
        raise SystemExit(f"cluster {c.name!r} is not up: python -m e2e.cluster up")
    bins = build.binaries()
    env = dict(
        os.environ,
        KUBECONFIG=str(c.admin_kubeconfig),
        PREFIXROUTE_NETNS=c.name,
        PATH=f"{bins['kubectl'].parent}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    os.execvpe("ip", ["ip", "netns", "exec", c.name, *(cmd or [os.environ.get("SHELL", "/bin/bash")])], env)
    return 127  # not reached


def logs(c: Cluster, pod: str, container: str | None, follow: bool) -> int:
    """Print a runner-managed pod's whole container log file: every start, the runner's header
    lines included (``kubectl logs`` shows one run, through the runner's kubelet endpoint)."""
    ns, _, name = pod.rpartition("/")
    dirs = sorted((c.logs / "pods").glob(f"{ns or 'default'}_{name}_*"), key=lambda d: d.stat().st_mtime)
    if not dirs:
        raise SystemExit(
            f"no logs for pod {ns or 'default'}/{name} under {c.logs / 'pods'} "
            "(only pods of the runner's images have them)"
        )
    files = sorted(dirs[-1].glob(f"{container or '*'}.log"))
    if len(files) != 1:
        raise SystemExit(f"choose a container with -c: {', '.join(f.stem for f in files) or 'none'}")
    argv = ["tail", "-n", "+1"] + (["-F"] if follow else []) + [str(files[0])]
    os.execvp("tail", argv)
    return 127  # not reached


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.cluster", description=__doc__.splitlines()[0])
    parser.add_argument("--name", help="network namespace / cluster name (default $PREFIXROUTE_NETNS or prefixroute)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", help="start (no-op when already up)")
    p_up.add_argument("--restart", action="store_true", help="take it down first if it is up")
    p_up.add_argument(
        "--runner-nodes",
        action="store_true",
        help="no KWOK (not built, not started): the pod runner keeps the nodes Ready and gives its pods their IPs; "
        "other images' pods stay Pending (the demo's cluster; the e2e suite's has KWOK)",
    )
    sub.add_parser("down", help="stop everything and delete the namespace")
    sub.add_parser("status", help="processes, API health, nodes")
    sub.add_parser("env", help="print export lines")
    sub.add_parser("info", help="print paths and URLs as JSON")
    p_logs = sub.add_parser("logs", help="a runner-managed pod's container log")
    p_logs.add_argument("pod", help="[NAMESPACE/]POD")
    p_logs.add_argument("-c", "--container")
    p_logs.add_argument("-f", "--follow", action="store_true")
    p_exec = sub.add_parser("exec", help="run a command inside the namespace")
    p_exec.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `... | head` ends quietly
    c = Cluster.from_env(args.name)
    if os.geteuid() != 0 and args.cmd in ("up", "down", "exec"):
        raise SystemExit("network namespaces need root (or CAP_SYS_ADMIN + CAP_NET_ADMIN)")
    if args.cmd == "up":
        try:
            up(c, restart=args.restart, runner_nodes=args.runner_nodes)
        except ProcessError as exc:  # a daemon that would not start: its own words, no traceback
            raise SystemExit(str(exc)) from None
    elif args.cmd == "down":
        down(c)
    elif args.cmd == "status":
        return status(c)
    elif args.cmd == "env":
        print_env(c)
    elif args.cmd == "info":
        print(json.dumps(c.info(), indent=2))
    elif args.cmd == "logs":
        return logs(c, args.pod, args.container, args.follow)
    elif args.cmd == "exec":
        cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
        return exec_in(c, cmd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
