"""``python -m e2e [pytest args]``: build what is missing, then run the e2e suite.

The suite brings the cluster up itself (see e2e/conftest.py); this entry point only adds
the build step up front so its timing is printed on its own.
"""

from __future__ import annotations

import subprocess
import sys

from e2e import build, pins


def main(argv: list[str]) -> int:
    build.ensure()
    return subprocess.call([sys.executable, "-m", "pytest", str(pins.E2E_DIR), *argv], cwd=pins.REPO_ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
