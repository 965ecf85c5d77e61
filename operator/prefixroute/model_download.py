"""`prefixroute model-download`: fill a model cache volume with one hub revision, once.

The operator runs this in a Job (controller/builders/model_cache.py) on the cache's
PersistentVolumeClaim. Files go into the hub library's own cache layout under
``--cache-dir`` (blobs, then snapshot links), which is what makes a second run resumable:
a file already in the cache is never fetched again, a partial one is continued. Only what
an engine loads is fetched (``ALLOW_PATTERNS``): configs, tokenizer files, chat templates
and ``*.safetensors`` — never the ``*.bin`` / ``*.pt`` copies many repositories carry too.

The last step is the marker: a symlink at ``--link`` to the snapshot folder, written by one
rename, so the link exists only when every file does. Engines are pointed at the link, so
an engine can never start on a half-written cache; a run that finds the link done exits
at once. ``HF_TOKEN`` and ``HF_ENDPOINT`` are read from the environment, as the engine
reads them.

With ``--lock`` (a per-node cache, where every engine pod on a node runs this as an init
container on the same folder) the whole run holds an exclusive ``flock`` on that file: the
first pod downloads, the others block until it ends, then find the link and exit at once,
so a node asks the hub for each file once however many of its pods start together. The
kernel drops the lock with the process, so a pod killed mid-download hands over to the next.

The outcome is told twice, both free of any API permission: by the exit status (which the
Job's podFailurePolicy uses to stop retrying what a retry cannot fix, and the operator
reads as the reason) and by a one-line JSON record in the container's termination message
(reason, bytes, the client's own words), which the operator copies into status.

While it runs, a line of JSON every ``--progress-seconds`` on stdout says the bytes in the
cache so far (the repository's blobs, partial ones included, so a resumed download starts
where it was) and the bytes to fetch in all (the hub's file listing, filtered as the
download is): the operator reads the pod log's last line into status.modelCache.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import json
import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefixroute.download_outcomes import (
    EXIT_FAILED,
    EXIT_GATED,
    EXIT_NO_SPACE,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_UNREACHABLE,
    reason_of_exit,
)

ALLOW_PATTERNS = (
    "*.json",  # config, generation config, tokenizer config, safetensors index, chat_template.json
    "*.safetensors",
    "*.jinja",  # chat_template.jinja
    "tokenizer.model",  # SentencePiece
    "*.tiktoken",
    "merges.txt",
    "vocab.txt",
)
TERMINATION_LOG = "/dev/termination-log"
PROGRESS_SECONDS = 5.0


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    message: str
    bytes_done: int = 0

    @property
    def reason(self) -> str:
        return reason_of_exit(self.exit_code)

    def record(self) -> str:
        """The termination message: one line of JSON, well under the kubelet's 4 KiB."""
        return json.dumps(
            {"reason": self.reason, "bytesDone": self.bytes_done, "message": self.message[:2000]},
            separators=(",", ":"),
        )


def exit_code_of(exc: BaseException) -> int:
    """Which exit status a failed download gets: out of space, refused, missing, or unreachable."""
    from prefixroute.front.hub_tokenizer import reason_of  # the hub client's errors, read one way

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno == errno.ENOSPC:
            return EXIT_NO_SPACE
        seen = seen.__cause__ or seen.__context__
    return {"unauthorized": EXIT_GATED, "not_found": EXIT_NOT_FOUND, "unreachable": EXIT_UNREACHABLE}.get(
        reason_of(exc), EXIT_FAILED
    )


def folder_bytes(folder: Path) -> int:
    """The bytes of the files under `folder`, links followed (a snapshot's files link to blobs)."""
    total = 0
    for path in folder.rglob("*"):
        try:
            if path.is_file():
                total += path.stat().st_size
        except OSError:
            continue
    return total


def write_link(link: Path, target: Path) -> None:
    """`link` pointing at `target` by a relative path (the volume is mounted elsewhere by each
    pod), made by one rename so a reader sees no link or the whole one."""
    link.parent.mkdir(parents=True, exist_ok=True)
    relative = os.path.relpath(target, link.parent)
    temporary = link.with_name(f".{link.name}.tmp")
    if temporary.is_symlink() or temporary.exists():
        temporary.unlink()
    temporary.symlink_to(relative, target_is_directory=True)
    os.replace(temporary, link)


def progress_line(done: int, total: int | None) -> str:
    """One progress record (the operator's `cache_status.progress_of` reads it back)."""
    progress = {"bytesDone": done} if total is None else {"bytesDone": done, "bytesTotal": total}
    return json.dumps({"progress": progress}, separators=(",", ":"))


def expected_bytes(repo: str, revision: str | None, token: str | None) -> int | None:
    """The bytes of the files the download will fetch, from the hub's listing filtered as the
    download filters it; None when the hub does not say (the download reports why it fails)."""
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoFile
    from huggingface_hub.utils._paths import filter_repo_objects

    try:
        api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None, token=token)
        files = [f for f in api.list_repo_tree(repo, revision=revision, recursive=True) if isinstance(f, RepoFile)]
    except Exception:
        return None
    return sum(f.size for f in filter_repo_objects(files, allow_patterns=list(ALLOW_PATTERNS), key=lambda f: f.path))


class ProgressReporter:
    """Prints a progress line every `seconds` while a download runs (a daemon thread: the
    download's own errors are never its business)."""

    def __init__(self, blobs: Path, total: int | None, seconds: float) -> None:
        self.blobs, self.total, self.seconds = blobs, total, seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="download-progress", daemon=True)

    def __enter__(self) -> ProgressReporter:
        if self.seconds > 0:
            self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while True:
            print(progress_line(folder_bytes(self.blobs) if self.blobs.is_dir() else 0, self.total), flush=True)
            if self._stop.wait(self.seconds):
                return


def download(
    repo: str, revision: str | None, cache_dir: Path, link: Path, progress_seconds: float = PROGRESS_SECONDS
) -> Outcome:
    """Fetch `repo` at `revision` into `cache_dir`, then write `link`; never raises."""
    if link.is_symlink() and link.resolve().is_dir():
        return Outcome(EXIT_OK, f"{repo} already cached", folder_bytes(link))
    from huggingface_hub import snapshot_download
    from huggingface_hub.file_download import repo_folder_name
    from huggingface_hub.utils.tqdm import disable_progress_bars

    disable_progress_bars()  # a pod's log is no terminal
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN") or None
    total = expected_bytes(repo, revision, token) if progress_seconds > 0 else None
    blobs = cache_dir / repo_folder_name(repo_id=repo, repo_type="model") / "blobs"
    try:
        with ProgressReporter(blobs, total, progress_seconds):
            folder = Path(
                snapshot_download(
                    repo,
                    revision=revision,
                    cache_dir=str(cache_dir),
                    allow_patterns=list(ALLOW_PATTERNS),
                    endpoint=os.environ.get("HF_ENDPOINT") or None,
                    token=token,
                )
            )
        write_link(link, folder)
    except Exception as exc:
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return Outcome(exit_code_of(exc), f"{repo}: {first_line}", folder_bytes(cache_dir))
    return Outcome(EXIT_OK, f"{repo} cached", folder_bytes(folder))


@contextlib.contextmanager
def held(lock: Path | None) -> Iterator[None]:
    """An exclusive flock on `lock` (made if missing) for the block; nothing when None."""
    if lock is None:
        yield
        return
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes, or the process ends
        yield


def report(outcome: Outcome, termination_log: Path) -> None:
    """The record on stdout (the pod's log) and in the termination message, where one can be written."""
    line = outcome.record()
    print(line, flush=True)
    try:
        termination_log.write_text(line)
    except OSError:
        pass  # outside a pod: the log line is the record


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "model-download",
        help="fill a model cache with one hub revision (the operator's download Job)",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("--repo", required=True, help="hub repository id, org/name")
    parser.add_argument("--revision", default=None, help="branch, tag or commit (default: the default branch)")
    parser.add_argument("--cache-dir", type=Path, required=True, help="the hub cache folder on the cache volume")
    parser.add_argument("--link", type=Path, required=True, help="the marker link to the snapshot, written last")
    parser.add_argument(
        "--lock",
        type=Path,
        default=None,
        help="a file to hold an exclusive lock on for the whole run (pods sharing one node's cache)",
    )
    parser.add_argument("--termination-log", type=Path, default=Path(TERMINATION_LOG))
    parser.add_argument(
        "--progress-seconds",
        type=float,
        default=PROGRESS_SECONDS,
        help="how often to print the bytes so far as a line of JSON (0: never)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.progress_seconds < 0:
        print("model-download: --progress-seconds must not be negative", file=sys.stderr)
        return 2
    with held(args.lock):
        outcome = download(args.repo, args.revision, args.cache_dir, args.link, args.progress_seconds)
    report(outcome, args.termination_log)
    if outcome.exit_code != EXIT_OK:
        print(f"model-download: {outcome.reason}: {outcome.message}", file=sys.stderr)
    return outcome.exit_code
