"""router-bench --precise: its tokenizer folder serves the router, and the events go where the router puts them."""

from prefixroute.bench.router_cost.precise_cost import event_cost, tokenize_cost
from prefixroute.engine_sim.model_dir import ensure_model_dir


def test_event_cost_keeps_each_members_view_equal_to_what_its_engine_holds():
    found = event_cost(members=2, runs=5, blocks_per_run=4)
    assert found["indexed_blocks"] == 2 * 5 * 4  # stores and evictions both reached the index
    assert found["stored_us_per_block"] > 0
    assert found["removed_us_per_block"] > 0
    assert found["bytes_per_indexed_block"] > 0  # the router's views grew by what they hold


def test_tokenize_cost_grows_the_prompt_to_the_size_asked_and_times_each_step(tmp_path):
    folder = ensure_model_dir(tmp_path / "model", vocab=600, lines=2_000)
    found = tokenize_cost(folder, prompt_tokens=3_000, repeats=2)
    assert found["prompt_tokens"] >= 3_000
    assert found["tokenize_completion_ms"] > 0
    assert found["tokenize_chat_ms"] > 0
    assert found["token_keys_ms"] > 0
    assert found["approximate_keys_ms"] > 0
