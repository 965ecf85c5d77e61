"""router-bench --precise: its tokenizer folder serves the router, and the events go where the router puts them."""

from prefixroute import prompt_tokens
from prefixroute.bench.router_cost.precise_cost import event_cost, tokenize_cost
from prefixroute.engine_sim.model_dir import ensure_model_dir


def test_event_cost_keeps_each_members_view_equal_to_what_its_engine_holds():
    found = event_cost(members=2, runs=5, blocks_per_run=4)
    assert found["indexed_blocks"] == 2 * 5 * 4  # stores and evictions both reached the index
    assert found["stored_us_per_block"] > 0
    assert found["removed_us_per_block"] > 0
    assert found["removed_one_by_one_us_per_block"] > 0
    assert found["bytes_per_indexed_block"] > 0  # the router's views grew by what they hold


def test_tokenize_cost_grows_the_prompt_to_the_size_asked_and_times_each_step(tmp_path):
    folder = ensure_model_dir(tmp_path / "model", vocab=600, lines=2_000)
    found = tokenize_cost(folder, prompt_tokens=3_000, repeats=2)
    assert found["prompt_tokens"] >= 3_000
    assert found["tokenize_completion_ms"] > 0
    assert found["tokenize_chat_ms"] > 0
    assert found["token_keys_ms"] > 0
    assert found["approximate_keys_ms"] > 0
    assert 0 < found["bench_prompt_new_question_ms"]
    assert found["bench_prompt_whole_ms"] > 0


def test_turn_cost_keys_each_turn_after_the_one_before_with_and_without_the_store(tmp_path):
    from prefixroute.bench.router_cost.precise_cost import turn_cost

    folder = ensure_model_dir(tmp_path / "model", vocab=600, lines=2_000)
    found = turn_cost(folder, prompt_chars=12_000, chats=2, members=2)
    assert found["prompt_tokens"] > 1_000
    assert 0 < found["new_tokens_per_turn"] < found["prompt_tokens"]  # a turn brings little that is new
    assert found["store_decision_ms"] > 0
    assert found["whole_decision_ms"] > 0


def test_the_chat_markers_are_special_tokens_so_a_chat_is_cut_at_them(tmp_path):
    folder = ensure_model_dir(tmp_path / "model", vocab=600, lines=2_000)
    tokens = prompt_tokens.ModelFolderTokens(folder)
    tokens("chat", {"messages": [{"role": "user", "content": "the cache"}]})
    assert tokens.store.counts()["pieces"] >= 2  # "user"'s marker cut the text
