import pytest

from prefixroute.bench import texts
from prefixroute.bench.errors import TraceError
from prefixroute.bench.trace import load_trace, read_rows
from prefixroute.cli import main
from prefixroute.engine_model import tokenizer

from .conftest import write_trace


def test_each_hash_id_is_a_fixed_512_token_text():
    assert len(tokenizer.encode(texts.block_text(7))) == 512
    assert texts.block_text(7) == texts.block_text(7)
    assert texts.block_text(7) != texts.block_text(8)
    assert "  " not in texts.block_text(7) and texts.block_text(7) == texts.block_text(7).strip()


def test_prompt_has_exactly_input_length_tokens_with_a_partial_last_block():
    prompt = texts.trace_prompt([1, 2, 3], 2 * 512 + 17, unique=0)
    assert tokenizer.count(prompt) == 2 * 512 + 17
    assert prompt.startswith(texts.block_text(1) + texts.block_text(2))


def test_rows_sharing_leading_ids_share_a_token_prefix():
    a = tokenizer.encode(texts.trace_prompt([1, 2, 3], 1536, unique=1))
    b = tokenizer.encode(texts.trace_prompt([1, 2, 9], 1536, unique=2))
    assert list(a[:1024]) == list(b[:1024]) and list(a[1024:]) != list(b[1024:])


def test_longer_input_than_its_blocks_is_padded_with_unique_text():
    prompt = texts.trace_prompt([1], 600, unique=5)
    assert tokenizer.count(prompt) == 600
    assert prompt != texts.trace_prompt([1], 600, unique=6)


def test_load_trace_orders_by_time_and_keeps_lengths(small_trace):
    requests = load_trace(small_trace)
    assert len(requests) == 12
    assert [r.at for r in requests] == sorted(r.at for r in requests)
    assert requests[0].at == 0.0 and requests[1].at == 0.25
    body = requests[3].body("m")
    assert body["max_tokens"] == requests[3].output_tokens == 8
    assert body["stream"] is True and body["model"] == "m"
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


def test_cli_reports_a_bad_line_in_one_line_without_traceback(tmp_path, capsys):
    path = write_trace(tmp_path / "t.jsonl", [{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}])
    path.write_text(path.read_text() + '{"timestamp": 1, "input_length": 5}\n')
    code = main(["bench", "simulate", "--trace", str(path), "--replicas", "2"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"{path}:2:" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
