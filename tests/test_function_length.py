"""No function or method in operator/prefixroute is longer than 80 lines.

A function that long does several things in a row; named steps say what each is and let a
reader (and a test) take one at a time. The length is counted from the `def` line to the
function's last line (`end_lineno - lineno + 1`: decorators out, docstring and comments in),
for every function, nested ones and methods included, read with `ast` (nothing is imported).
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "operator" / "prefixroute"
LIMIT = 80


def lengths(source: str) -> Iterator[tuple[str, int, int]]:
    """(qualified name, first line, length in lines) of every function in `source`."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, int, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                assert child.end_lineno is not None
                yield name, child.lineno, child.end_lineno - child.lineno + 1
                yield from walk(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, prefix + child.name + ".")
            else:
                yield from walk(child, prefix)

    yield from walk(ast.parse(source), "")


def test_the_count_runs_from_def_to_the_last_line_and_sees_every_function() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT - 2))
    source = textwrap.dedent(
        """\
        @decorated
        def top():
            '''doc'''
        {body}

        class Holder:
            async def method(self):
                def inner():
                    return 1
                return inner
        """
    ).replace("{body}", body)
    found = {name: (line, length) for name, line, length in lengths(source)}
    assert found == {
        "top": (2, LIMIT),  # one line more and the test below fails
        "Holder.method": (LIMIT + 4, 4),
        "Holder.method.inner": (LIMIT + 5, 2),
    }


def test_no_function_is_longer_than_the_limit() -> None:
    long = [
        f"{path.relative_to(REPO)}:{line} {name}: {length} lines"
        for path in sorted(PACKAGE.rglob("*.py"))
        for name, line, length in lengths(path.read_text(encoding="utf-8"))
        if length > LIMIT
    ]
    assert not long, f"split these into named steps (at most {LIMIT} lines each):\n" + "\n".join(long)
