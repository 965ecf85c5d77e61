import pytest

from prefixroute.bench.errors import TraceError
from prefixroute.bench.trace import load_trace, read_rows
from prefixroute.engine_model import tokenizer


def test_load_trace_orders_by_time_and_keeps_lengths(small_trace):
    requests = load_trace(small_trace)
    assert len(requests) == 12
    assert [r.at for r in requests] == sorted(r.at for r in requests)
    assert requests[0].at == 0.0
    assert requests[1].at == 0.25
    body = requests[3].body("m")
    assert body["max_tokens"] == requests[3].output_tokens == 8
    assert body["stream"] is True
    assert body["model"] == "m"
    assert tokenizer.count(body["prompt"]) == 3 * 512 + 103


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"timestamp": 0, "input_length": 10, "output_length": 1}', "'hash_ids' must be a list"),
        (
            '{"timestamp": 0, "input_length": "10", "output_length": 1, "hash_ids": []}',
            "'input_length' must be an integer",
        ),
        ('{"timestamp": -1, "input_length": 10, "output_length": 1, "hash_ids": []}', "'timestamp'"),
        (
            '{"timestamp": 0, "input_length": 10, "output_length": 0, "hash_ids": []}',
            "'output_length' must be at least 1",
        ),
        ('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": ["a"]}', "'hash_ids'"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path, line, reason):
    good = '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}'
    path = tmp_path / "bad.jsonl"
    path.write_text(good + "\n\n" + line + "\n")
    with pytest.raises(TraceError) as caught:
        read_rows(path)
    assert str(caught.value).startswith(f"{path}:3: ")
    assert reason in str(caught.value)


def test_missing_and_empty_files_are_clear_errors(tmp_path):
    with pytest.raises(TraceError, match="cannot open"):
        read_rows(tmp_path / "nope.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(TraceError, match="no requests"):
        read_rows(tmp_path / "empty.jsonl")
