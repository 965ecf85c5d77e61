"""A Hugging Face hub stand-in for tests: the few endpoints `huggingface_hub.snapshot_download`
asks, served from folders the test writes, on 127.0.0.1 or an address given (point HF_ENDPOINT at `url`).

What the client asks, read from its source (huggingface_hub 2.x):

- `GET /api/models/{repo}/revision/{rev}`: the repository's info, whose `sha` is the commit
  the revision resolves to (then every file is asked at that commit);
- `GET /api/models/{repo}/tree/{commit}?recursive=True`: the files (`type`, `path`, `size`,
  `oid`), one page when there is no `Link: <...>; rel="next"` header;
- `HEAD` then `GET /{repo}/resolve/{commit}/{file}`: the HEAD must carry `X-Repo-Commit` and an
  `ETag`, else the client refuses the answer as not a hub's.

Errors as the hub gives them: 401 (no token) or 403 (a token without access) with
`X-Error-Code: GatedRepo` for a gated repository; 404 with `RepoNotFound`, `RevisionNotFound` or
`EntryNotFound`. Every request's path is kept in `asked`, so a test can check that no weight
file was ever asked for, and the paths of the files it sent (GETs of /resolve/ answered 200)
in `sent`, so a test can count the downloads of each file. `bytes_per_second` slows each
file's body to that rate (a download that lasts long enough to watch its progress).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

REVISION = "main"


@dataclass
class Repo:
    folder: Path
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    token: str | None = None  # set: gated, this token only
    revisions: tuple[str, ...] = (REVISION,)

    def files(self) -> list[Path]:
        return sorted(p for p in self.folder.rglob("*") if p.is_file())


@dataclass
class Hub:
    repos: dict[str, Repo] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)
    sent: list[str] = field(default_factory=list)  # files whose bytes went out (GET answered 200)
    url: str = ""
    bytes_per_second: float | None = None  # each file's body, per request; None: at once

    def resolve(self, repo_id: str, rev: str) -> Repo | None:
        repo = self.repos.get(repo_id)
        return repo if repo is not None and rev in (*repo.revisions, repo.commit) else None


def _oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # git's blob id, as the hub's ETag


class _Handler(BaseHTTPRequestHandler):
    hub: Hub

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def _answer(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, code: str, commit: str | None = None) -> None:
        headers = {"X-Error-Code": code, "Content-Type": "application/json"}
        if commit:
            headers["X-Repo-Commit"] = commit
        self._answer(status, json.dumps({"error": code}).encode(), headers)

    def _allowed(self, repo: Repo) -> bool:
        if repo.token is None:
            return True
        given = self.headers.get("Authorization", "")
        if not given:
            self._error(401, "GatedRepo")
        elif given != f"Bearer {repo.token}":
            self._error(403, "GatedRepo")
        return given == f"Bearer {repo.token}"

    def _route(self) -> None:
        path = unquote(urlsplit(self.path).path)
        self.hub.asked.append(path)
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] in ("revision", "tree"):
            self._api("/".join(parts[2:4]), parts[4], parts[5])
        elif len(parts) >= 5 and parts[2] == "resolve":
            self._file("/".join(parts[:2]), parts[3], "/".join(parts[4:]))
        else:
            self._error(404, "RepoNotFound")

    def _repo(self, repo_id: str, rev: str) -> Repo | None:
        if repo_id not in self.hub.repos:
            self._error(404, "RepoNotFound")
            return None
        repo = self.hub.resolve(repo_id, rev)
        if repo is None:
            self._error(404, "RevisionNotFound")
            return None
        return repo if self._allowed(repo) else None

    def _api(self, repo_id: str, what: str, rev: str) -> None:
        repo = self._repo(repo_id, rev)
        if repo is None:
            return
        names = [str(p.relative_to(repo.folder)) for p in repo.files()]
        if what == "revision":
            info = {"id": repo_id, "sha": repo.commit, "siblings": [{"rfilename": n} for n in names]}
        else:
            info = [
                {"type": "file", "path": n, "size": (repo.folder / n).stat().st_size,
                 "oid": _oid((repo.folder / n).read_bytes())}
                for n in names
            ]  # fmt: skip
        self._answer(200, json.dumps(info).encode(), {"Content-Type": "application/json"})

    def _file(self, repo_id: str, rev: str, name: str) -> None:
        repo = self._repo(repo_id, rev)
        if repo is None:
            return
        file = repo.folder / name
        if not file.is_file():
            self._error(404, "EntryNotFound", repo.commit)
            return
        data = file.read_bytes()
        if self.command == "GET":
            self.hub.sent.append(f"{repo_id}/{name}")
        headers = {"X-Repo-Commit": repo.commit, "ETag": f'"{_oid(data)}"'}
        if self.command == "HEAD" or not self.hub.bytes_per_second:
            self._answer(200, data, headers)
            return
        self.send_response(200)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self._trickle(data, self.hub.bytes_per_second)

    def _trickle(self, data: bytes, rate: float) -> None:
        """`data` at `rate` bytes a second, a tenth of a second's worth at a time."""
        chunk, started = max(1, int(rate / 10)), time.monotonic()
        for sent in range(0, len(data), chunk):
            self.wfile.write(data[sent : sent + chunk])
            self.wfile.flush()
            ahead = (sent + chunk) / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)

    do_GET = do_HEAD = _route


@contextmanager
def serving(hub: Hub, host: str = "127.0.0.1") -> Iterator[Hub]:
    """`hub` served on a free port of `host` until the block ends (`hub.url` set); e2e tests
    give an address of the cluster's network namespace that its pods reach."""
    handler = type("Handler", (_Handler,), {"hub": hub})
    server = ThreadingHTTPServer((host, 0), handler)
    hub.url = f"http://{host}:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="hub", daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
