"""Chat templates rendered as vLLM renders them (the real check against vLLM: e2e/test_vllm_precise.py)."""

import json

import pytest

from prefixroute.model_chat_template import ChatTemplate, Unrenderable

# A Llama 3 style template: BOS, a header per message, generation prompt.
LLAMA = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)
# One that loops over each message's parts (vLLM then hands every content over as parts).
PARTS = (
    "{% for message in messages %}[{{ message.role }}]"
    "{% for part in message.content %}{{ part.text }};{% endfor %}\n{% endfor %}"
)


def folder(tmp_path, config=None, jinja=None):
    if config is not None:
        (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    if jinja is not None:
        (tmp_path / "chat_template.jinja").write_text(jinja)
    return tmp_path


def test_a_llama_style_template_renders_with_the_folders_special_tokens(tmp_path):
    template = ChatTemplate.from_folder(
        folder(tmp_path, {"chat_template": LLAMA, "bos_token": {"content": "<|begin_of_text|>", "lstrip": False}})
    )
    assert template is not None
    body = {"messages": [{"role": "system", "content": " Be brief. "}, {"role": "user", "content": "Hi"}]}
    assert template.render(body) == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    assert template.render({**body, "add_generation_prompt": False}).endswith("Hi<|eot_id|>")


def test_text_parts_are_joined_by_newlines_unless_the_template_loops_over_parts(tmp_path):
    parts = {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    joined = ChatTemplate({"default": "{% for m in messages %}{{ m.content }}|{% endfor %}"}, {})
    assert joined.render({"messages": [parts, {"role": "user", "content": "c"}]}) == "a\nb|c|"
    looped = ChatTemplate({"default": PARTS}, {})
    assert (
        looped.render({"messages": [parts, {"role": "user", "content": "c"}]}) == "[user]a;b;[user]c;"
    )  # trim_blocks eats the newline after a tag, as in transformers


def test_the_template_comes_from_the_jinja_file_and_tools_pick_the_tool_use_template(tmp_path):
    assert (
        ChatTemplate.from_folder(folder(tmp_path, jinja="{{ messages[0].content }}!")).render(
            {"messages": [{"role": "user", "content": "x"}]}
        )
        == "x!"
    )
    named = [
        {"name": "default", "template": "plain"},
        {"name": "tool_use", "template": "{{ tools[0].function.name }}"},
    ]
    template = ChatTemplate.from_folder(folder(tmp_path, {"chat_template": named}))
    assert template is not None
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    assert template.render({"messages": [{"role": "user", "content": "x"}], "tools": tools}) == "lookup"
    assert template.render({"messages": [{"role": "user", "content": "x"}]}) == "plain"


def test_a_folder_without_a_template_has_none(tmp_path):
    assert ChatTemplate.from_folder(folder(tmp_path, {"bos_token": "<s>"})) is None


def test_developer_messages_become_one_system_message_when_the_template_does_not_know_them():
    template = ChatTemplate({"default": "{% for m in messages %}{{ m.role }}:{{ m.content }}|{% endfor %}"}, {})
    body = {
        "messages": [
            {"role": "system", "content": "rules"},
            {"role": "user", "content": "hi"},
            {"role": "developer", "content": "more rules"},
        ]
    }
    assert template.render(body) == "system:rules\n\nmore rules|user:hi|"
    knows = ChatTemplate({"default": "{% for m in messages %}{{ m.role }}{% endfor %}{# 'developer' #}"}, {})
    assert knows.render(body) == "systemuserdeveloper"


def test_tool_call_arguments_reach_the_template_as_objects_and_kwargs_and_tojson_work():
    template = ChatTemplate(
        {"default": "{% for m in messages %}{% for c in m.tool_calls or [] %}{{ c.function.arguments | tojson }}"
                    "{% endfor %}{% endfor %}{{ flavour }}"},
        {},
    )  # fmt: skip
    call = {"type": "function", "function": {"name": "f", "arguments": '{"city": "Zürich"}'}}
    body = {
        "messages": [{"role": "assistant", "content": None, "tool_calls": [call]}],
        "chat_template_kwargs": {"flavour": "!"},
    }
    assert template.render(body) == '{"city": "Zürich"}!'


@pytest.mark.parametrize(
    "body",
    [
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
        {"messages": [{"role": "user", "content": "x"}], "continue_final_message": True},
        {"messages": [{"role": "user", "content": "x"}], "chat_template": "{{ 1 }}"},
        {"messages": []},
        {"messages": [{"content": "no role"}]},
        {"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": "nope"},
    ],
)
def test_what_cannot_be_rendered_exactly_is_refused(body):
    with pytest.raises(Unrenderable):
        ChatTemplate({"default": LLAMA}, {"bos_token": "<s>"}).render(body)


def test_a_template_that_raises_refuses_the_request_and_the_sandbox_holds():
    strict = ChatTemplate({"default": "{{ raise_exception('roles must alternate') }}"}, {})
    with pytest.raises(Unrenderable, match="roles must alternate"):
        strict.render({"messages": [{"role": "user", "content": "x"}]})
    sneaky = ChatTemplate({"default": "{{ messages.append(1) }}"}, {})
    with pytest.raises(Unrenderable):
        sneaky.render({"messages": [{"role": "user", "content": "x"}]})


def test_generation_blocks_render_their_body():
    template = ChatTemplate({"default": "{% generation %}{{ messages[0].content }}{% endgeneration %}"}, {})
    assert template.render({"messages": [{"role": "assistant", "content": "ok"}]}) == "ok"
