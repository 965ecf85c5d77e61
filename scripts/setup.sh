#!/usr/bin/env bash
# Set up this checkout on a fresh machine of the project's kind (root, Python 3.11, Go, apt):
#   1. a virtualenv .venv with the package installed editable and its extras
#      (.[fast,bench,test]) plus import-linter (the layer contracts in .importlinter);
#   2. the local control plane: `python -m e2e.build` apt-installs what is missing
#      (prometheus, iproute2, ...) and builds kube-apiserver, controller-manager, scheduler,
#      etcd and KWOK from their Go modules, cached in ~/.cache/prefixroute (a cold build
#      takes 6-12 minutes on 2 cores, a warm one under a second).
# Idempotent: a second run skips pip while pyproject.toml is unchanged, and the build is cached.
# Used by scripts/demo.sh and scripts/test.sh; run it alone to get a working checkout.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

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
    echo "$want" > "$stamp"
else
    step "python packages: up to date (pyproject.toml unchanged since the last install)"
fi

step "python -m e2e.build (system tools and the control plane's binaries, cached)"
.venv/bin/python -m e2e.build
step "setup done in $((SECONDS - started))s"
