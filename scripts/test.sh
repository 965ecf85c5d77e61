#!/usr/bin/env bash
# The README's test command (CI runs it through .ci/run): on a fresh machine of the
# project's kind (root, Python 3.11, Go, apt) set up and run every test:
#   setup         scripts/setup.sh --vllm: virtualenv, packages, every control-plane binary, the real vLLM (cached)
#   ruff          format and lint of operator/, tests/ and e2e/ (pyproject's [tool.ruff])
#   mypy          mypy --strict over operator/prefixroute
#   lint-imports  the layer contracts in .importlinter
#   pytest tests  unit and integration tests (no cluster)
#   live          tests/controller/test_live.py: the operator's handlers in-process against
#                 a real API server (a cluster of its own, taken down after)
#   pytest e2e    the end-to-end suite on the local control plane (its own cluster)
#   e2e vllm      e2e/test_vllm.py, test_vllm_precise.py, test_vllm_model_cache.py, then
#                 test_vllm_adapters.py, one module at a time, on the real vLLM (CPU build, tiny
#                 model) — after the rest, so its ~4 GB servers never run beside another e2e module
# Every step runs even when one before failed; the exit status is 1 if any failed — a
# pytest that collects nothing (exit status 5) fails like any other. Needs root.
#
# While working on the code, two shorter loops:
#   bash scripts/test.sh --quick                  # ruff, mypy, lint-imports, pytest tests but the short
#                                                 # fuzz, property search and soak: no cluster, no Go
#                                                 # build, no vLLM (setup.sh --quick)
#   bash scripts/test.sh --e2e e2e/test_ring.py   # one e2e module (or several, or any pytest
#       [more modules or pytest args]             # arguments) on a cluster of its own, set up with
#                                                 # setup.sh --e2e (the cluster's binaries; a module
#                                                 # that needs GIE's picker or prometheus-adapter builds
#                                                 # it); e2e/test_vllm*.py brings the real vLLM
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mode=all
e2e_args=()
case ${1:-} in
    --quick) mode=quick; shift ;;
    --e2e) mode=e2e; shift; e2e_args=("$@"); set -- ;;
esac
if [ $# -gt 0 ]; then
    echo "test.sh: unknown arguments $* (known: --quick, --e2e [pytest arguments])" >&2
    exit 2
fi
if [ $mode = e2e ] && [ ${#e2e_args[@]} = 0 ]; then
    echo "test.sh: --e2e wants the modules to run, e.g. bash scripts/test.sh --e2e e2e/test_ring.py" >&2
    exit 2
fi
if [ $mode != quick ] && [ "$(id -u)" != 0 ]; then
    echo "test.sh: run as root (the e2e suite runs clusters in network namespaces)" >&2
    exit 1
fi
started=$SECONDS
case $mode in
    all) setup_args=(--vllm) ;;
    quick) setup_args=(--quick) ;;
    e2e)
        setup_args=(--e2e)
        vllm=0
        for arg in "${e2e_args[@]}"; do
            case $arg in *test_vllm.py*|*test_vllm_precise.py*|*test_vllm_model_cache.py*|*test_vllm_adapters.py*) vllm=1 ;; esac
        done
        [ $vllm = 0 ] || setup_args+=(--vllm)
        ;;
esac
bash scripts/setup.sh "${setup_args[@]}" || { echo "test.sh: setup failed" >&2; exit 1; }

results=()
failed=0
run() {  # run NAME COMMAND...: time it, remember how it went
    local name=$1; shift
    printf '\n==> %s: %s\n' "$name" "$*"
    local t0=$SECONDS rc=0
    "$@" || rc=$?
    results+=("$(printf '%-13s %-6s %4ss' "$name" "$([ $rc = 0 ] && echo ok || echo "FAIL($rc)")" $((SECONDS - t0)))")
    [ $rc = 0 ] || failed=1
}

live() {  # the operator's live tests, on a cluster of their own
    local name="pr-live-$$" rc=0
    .venv/bin/python -m e2e.cluster --name "$name" up --restart >/dev/null || return 1
    local info kubeconfig state
    info=$(.venv/bin/python -m e2e.cluster --name "$name" info)
    kubeconfig=$(.venv/bin/python -c 'import json,sys; print(json.load(sys.stdin)["kubeconfig"])' <<<"$info")
    state=$(.venv/bin/python -c 'import json,sys; print(json.load(sys.stdin)["state"])' <<<"$info")
    .venv/bin/python -m e2e.cluster --name "$name" exec -- env PREFIXROUTE_LIVE_KUBECONFIG="$kubeconfig" \
        .venv/bin/python -m pytest tests/controller/test_live.py -q -rs -p no:cacheprovider || rc=$?
    .venv/bin/python -m e2e.cluster --name "$name" down >/dev/null || true
    if [ $rc = 0 ]; then rm -rf "$state"; else echo "live: logs of the failed run in $state/logs"; fi
    return $rc
}

if [ $mode = e2e ]; then
    if [ $vllm = 1 ]; then
        run "e2e vllm" env PREFIXROUTE_E2E_VLLM=1 .venv/bin/python -m pytest -q -rs -p no:cacheprovider "${e2e_args[@]}"
    else
        run "pytest e2e" .venv/bin/python -m pytest -q -rs -p no:cacheprovider "${e2e_args[@]}"
    fi
else
    run ruff bash -c '.venv/bin/ruff format --check --quiet operator tests e2e && .venv/bin/ruff check --quiet operator tests e2e'
    run mypy .venv/bin/mypy
    run lint-imports .venv/bin/lint-imports
    if [ $mode = quick ]; then
        # Unit and integration tests; the budgeted tiers (short fuzz, property search, soak:
        # a third of the suite's time, docs/reliability.md) are left to the whole command.
        run "pytest tests" .venv/bin/python -m pytest tests -q -p no:cacheprovider \
            --ignore=tests/fuzz/test_fuzz_short.py --ignore=tests/fuzz/test_properties.py \
            --ignore=tests/faults/test_soak.py
    else
        run "pytest tests" .venv/bin/python -m pytest tests -q -p no:cacheprovider
    fi
fi
if [ $mode = all ]; then
    run live live
    run "pytest e2e" .venv/bin/python -m pytest e2e -q -p no:cacheprovider
    run "e2e vllm" env PREFIXROUTE_E2E_VLLM=1 .venv/bin/python -m pytest e2e/test_vllm.py e2e/test_vllm_precise.py \
        e2e/test_vllm_model_cache.py e2e/test_vllm_adapters.py -q -rs -p no:cacheprovider
fi

printf '\n==> summary\n'
printf '  %s\n' "${results[@]}"
printf '  %-13s %-6s %4ss\n' total "$([ $failed = 0 ] && echo ok || echo FAIL)" $((SECONDS - started))
exit $failed
