#!/usr/bin/env bash
# The README's main job, on a fresh machine of the project's kind (root, Python 3.11, Go, apt):
# set up what the demo runs and nothing more (scripts/setup.sh --demo: virtualenv, the package,
# the cluster's binaries — cached; no test tools, no GIE picker, no prometheus-adapter),
# start the local Kubernetes cluster, install the operator with the kustomize manifests,
# run the engine-sim example as a prefix-cache model and its round-robin twin, replay a
# slice of the Mooncake trace (../shared/traces/; generated multi-turn chats sized to the engines without
# it) through both routers, and print hit rate and TTFT with ratios against round-robin,
# then `kubectl get prm`. See e2e/demo.py.
#
#   bash scripts/demo.sh                 # leaves the cluster up; prints how to tear it down
#   bash scripts/demo.sh --down          # tears it down at the end
#   bash scripts/demo.sh --requests 500 --speed 4   # more of the trace, faster (see --help)
#   bash scripts/demo.sh --engine vllm   # the same on real vLLM pods (its CPU build, a tiny model;
#                                        # setup.sh --vllm installs it first; see docs/vllm.md)
#
# Idempotent: a second run reuses everything and starts from empty caches.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ "$(id -u)" != 0 ]; then
    echo "demo.sh: run as root (the cluster lives in a network namespace)" >&2
    exit 1
fi
started=$SECONDS
setup_args=(--demo)
prev=
for arg in "$@"; do  # --engine vllm / --engine=vllm: the real vLLM is installed too
    if [ "$arg" = --engine=vllm ] || { [ "$prev" = --engine ] && [ "$arg" = vllm ]; }; then
        setup_args+=(--vllm)
    fi
    prev=$arg
done
bash scripts/setup.sh "${setup_args[@]}"
printf '\n==> the demo (python -m e2e.demo %s)\n' "$*"
.venv/bin/python -m e2e.demo "$@"
printf '==> demo.sh done in %ss\n' "$((SECONDS - started))"
