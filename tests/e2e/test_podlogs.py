"""e2e/podlogs.py: a kubelet's answer from the pod runner's log file: the run asked for, no
runner lines, tailLines then limitBytes, and clear refusals."""

import pytest

from e2e import podlogs

LOG = (
    b'--- 2026-12-03T10:00:00Z podrunner: start app: ["prefixroute", "x"]\n'
    b"first run 1\nfirst run 2\n"
    b'--- 2026-12-03T10:00:05Z podrunner: start app: ["prefixroute", "x"]\n'
    b"--- podrunner: vllm/vllm-openai here: one CPU\n"
    b"second 1\nsecond 2\nsecond 3\npartial"
)


def test_the_last_run_is_shown_without_the_runners_lines() -> None:
    assert podlogs.select(LOG, podlogs.LogQuery()) == b"second 1\nsecond 2\nsecond 3\npartial"
    assert podlogs.select(LOG, podlogs.LogQuery(previous=True)) == b"first run 1\nfirst run 2\n"
    assert podlogs.runs(LOG)[0] == b"first run 1\nfirst run 2\n"


def test_tail_lines_count_a_last_line_without_newline_and_limit_bytes_cut_what_is_left() -> None:
    assert podlogs.select(LOG, podlogs.LogQuery(tail_lines=2)) == b"second 3\npartial"
    assert podlogs.select(LOG, podlogs.LogQuery(tail_lines=0)) == b""
    assert podlogs.select(LOG, podlogs.LogQuery(tail_lines=99)) == b"second 1\nsecond 2\nsecond 3\npartial"
    assert podlogs.select(LOG, podlogs.LogQuery(tail_lines=2, limit_bytes=5)) == b"secon"
    assert podlogs.select(LOG, podlogs.LogQuery(limit_bytes=10)) == b"second 1\ns"
    assert podlogs.tail(b"a\r\nb\rc\n", 1) == b"b\rc\n"  # \r is no line end to the kubelet


def test_the_query_the_api_server_passes_is_read_and_what_cannot_be_answered_refused() -> None:
    query = podlogs.parse_query("follow=true&limitBytes=16384&previous=false&tailLines=5")
    assert query == podlogs.LogQuery(tail_lines=5, limit_bytes=16384, previous=False, follow=True)
    assert podlogs.parse_query("") == podlogs.LogQuery()
    for bad, said in (
        ("tailLines=-1", "tailLines=-1: want at least 0"),
        ("limitBytes=0", "limitBytes=0: want at least 1"),
        ("tailLines=x", "want a whole number"),
        ("follow=maybe", "want true or false"),
        ("timestamps=true", "no time per log line"),
        ("sinceSeconds=10", "no time per log line"),
        ("stream=Stderr", "share one file"),
    ):
        with pytest.raises(podlogs.LogQueryError, match=said):
            podlogs.parse_query(bad)


def test_a_previous_run_that_is_not_there_and_a_file_with_no_start_are_refused() -> None:
    once = b'--- 2026-12-03T10:00:00Z podrunner: start app: ["x"]\nonly\n'
    assert podlogs.select(once, podlogs.LogQuery()) == b"only\n"
    with pytest.raises(podlogs.LogQueryError, match="previous terminated container not found"):
        podlogs.select(once, podlogs.LogQuery(previous=True))
    with pytest.raises(podlogs.LogQueryError, match="has not started"):
        podlogs.select(b"", podlogs.LogQuery())


def test_a_follow_stops_at_the_next_start() -> None:
    assert podlogs.until_restart(b"more\n") == (b"more\n", False)
    again = b'tail\n--- 2026-12-03T10:00:09Z podrunner: start app: ["x"]\nnew\n'
    assert podlogs.until_restart(again) == (b"tail\n", True)
