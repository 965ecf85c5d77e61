"""The stand-in Hugging Face hub the e2e tests serve to their pods (tests/hub_server.py) on the
cluster's host address (10.244.0.1, which every pod reaches), holding a tiny model — a small
BPE and a ChatML template (tests/chat_models.py), or a folder the test names — under the
repository ids a test asks for, each open or gated behind one token. Shared by the modules
that need a hub (test_hub_tokenizer.py, test_model_cache.py, test_vllm_model_cache.py): the
hub must be started inside the cluster's network namespace, so after the `cluster` fixture.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from e2e import layout
from tests import chat_models
from tests.hub_server import Hub, Repo, serving


@contextmanager
def tiny_hub(
    repos: Mapping[str, str | None], model: Path | None = None, bytes_per_second: float | None = None
) -> Iterator[Hub]:
    """A hub serving the tiny model — or the model folder `model` (the real vLLM's tiny model)
    — as each of `repos` (id -> the one token that may read it, None: open) until the block
    ends, each file at `bytes_per_second` if given; the tiny model's folder is readable by the
    pods' user (65532)."""
    root = Path(tempfile.mkdtemp(prefix="e2e-hub-"))
    try:
        folder = model or chat_models.model_folder(root / "tiny", "chatml")
        if model is None:
            for path in (root, folder, *folder.iterdir()):  # the engine pods run as 65532 and may mount it
                os.chmod(path, 0o755 if path.is_dir() else 0o644)
        hub = Hub({repo: Repo(folder, token=token) for repo, token in repos.items()}, bytes_per_second=bytes_per_second)
        with serving(hub, layout.HOST_IP) as running:
            yield running
    finally:
        shutil.rmtree(root, ignore_errors=True)
