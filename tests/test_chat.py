"""Chat format: rendering, per-turn flags, parsing back, and the tokenizer's assistant mask."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadekit.chat import (
    EMPTY_THINK, MARKUP_TOKENS, chat_template, install_chat_template, parse_assistant, render,
    strip_flag, thinking_mode, with_flag,
)

TOOLS = [{"type": "function", "function": {
    "name": "add", "description": "Add two integers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                   "required": ["a", "b"]}}}]


def assistant_part(rendered: str) -> str:
    """The last assistant turn's text, from after its header through <|im_end|>."""
    return rendered.rsplit("<|im_start|>assistant\n", 1)[1].rstrip("\n")


def test_flags():
    assert thinking_mode("Solve it. /think")
    assert thinking_mode("Solve it.")  # default: think
    assert not thinking_mode("Solve it. /no_think  ")
    assert strip_flag("Solve it. /no_think") == "Solve it."
    assert strip_flag("Solve it. /think") == "Solve it."
    assert strip_flag("Solve it.") == "Solve it."
    assert with_flag("Solve it. /think", think=False) == "Solve it. /no_think"


def test_think_turn_renders_reasoning_then_answer():
    text = render([{"role": "user", "content": "2+2? /think"},
                   {"role": "assistant", "reasoning_content": "2 and 2 make 4.", "content": "4"}])
    assert text == ("<|im_start|>user\n2+2? /think<|im_end|>\n"
                    "<|im_start|>assistant\n<think>\n2 and 2 make 4.\n</think>\n\n4<|im_end|>\n")


def test_no_think_turn_has_empty_think_block_even_if_reasoning_given():
    text = render([{"role": "user", "content": "2+2? /no_think"},
                   {"role": "assistant", "reasoning_content": "ignored", "content": "4"}])
    assert assistant_part(text) == EMPTY_THINK + "4<|im_end|>"


def test_think_block_inside_content_is_split_out():
    a = render([{"role": "user", "content": "q"}, {"role": "assistant", "content": "<think>r</think>a"}])
    b = render([{"role": "user", "content": "q"},
                {"role": "assistant", "reasoning_content": "r", "content": "a"}])
    assert a == b


def test_generation_prompt_prefills_empty_think_only_for_no_think():
    think = render([{"role": "user", "content": "q /think"}], add_generation_prompt=True)
    assert think.endswith("<|im_start|>assistant\n")
    no_think = render([{"role": "user", "content": "q /no_think"}], add_generation_prompt=True)
    assert no_think.endswith("<|im_start|>assistant\n" + EMPTY_THINK)


def test_multi_turn_flags_are_per_turn_and_history_drops_thinking():
    msgs = [
        {"role": "user", "content": "a? /think"},
        {"role": "assistant", "reasoning_content": "old reasoning", "content": "A"},
        {"role": "user", "content": "b? /no_think"},
        {"role": "assistant", "content": "B"},
        {"role": "user", "content": "c?"},
        {"role": "assistant", "reasoning_content": "fresh reasoning", "content": "C"},
    ]
    text = render(msgs)
    assert "old reasoning" not in text  # historic reasoning dropped, as Qwen3
    assert "<|im_start|>assistant\nA<|im_end|>" in text
    assert "<|im_start|>assistant\nB<|im_end|>" in text
    assert assistant_part(text) == "<think>\nfresh reasoning\n</think>\n\nC<|im_end|>"
    # The mode follows the last user turn: switch c? to /no_think.
    msgs[4] = {"role": "user", "content": "c? /no_think"}
    assert assistant_part(render(msgs)) == EMPTY_THINK + "C<|im_end|>"
    assert render(msgs[:5], add_generation_prompt=True).endswith(EMPTY_THINK)


def test_tools_in_system_prompt_and_tool_turns():
    msgs = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "add 2 and 3 /no_think"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}]},
        {"role": "tool", "content": "5"},
        {"role": "tool", "content": "done"},
        {"role": "assistant", "content": "5"},
    ]
    text = render(msgs, tools=TOOLS)
    system = text.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\nBe brief.\n\n# Tools")
    assert "<tools>\n" + json.dumps(TOOLS[0]) + "\n</tools>" in system
    assert ('<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call><|im_end|>'
            in text)
    assert ("<|im_start|>user\n<tool_response>\n5\n</tool_response>\n"
            "<tool_response>\ndone\n</tool_response><|im_end|>\n") in text
    assert text.count("<|im_start|>user") == 2


def test_parse_assistant_basic_and_malformed():
    turn = parse_assistant("<think>\nr\n</think>\n\nanswer<|im_end|>")
    assert (turn.thinking, turn.answer, turn.tool_calls, turn.well_formed) == ("r", "answer", [], True)
    assert parse_assistant("just the answer", think=False).well_formed  # after a pre-filled block
    assert not parse_assistant("just the answer", think=True).well_formed
    assert not parse_assistant("<think>r</think>a", think=False).well_formed
    assert not parse_assistant("<think>unclosed").well_formed
    assert not parse_assistant("x <think>r</think>a").well_formed
    assert not parse_assistant("<think>a</think><think>b</think>c").well_formed
    bad = parse_assistant("<think>\n\n</think>\n\n<tool_call>{not json}</tool_call>")
    assert not bad.well_formed and "tool call" in bad.reason
    assert not parse_assistant("<think></think><tool_call>{\"name\": \"f\"}").well_formed
    assert not parse_assistant(None).well_formed  # type: ignore[arg-type]


reasoning_text = st.text(st.characters(blacklist_characters="<>", blacklist_categories=("Cs",)),
                         max_size=40).map(str.strip)
answer_text = reasoning_text.filter(bool)
json_scalars = st.one_of(st.integers(-1000, 1000), st.booleans(), st.text(max_size=8), st.none())
tool_calls = st.lists(st.fixed_dictionaries({
    "name": st.sampled_from(["add", "search", "get_weather"]),
    "arguments": st.dictionaries(st.sampled_from(["a", "b", "query"]), json_scalars, max_size=3)}),
    max_size=2)


@settings(max_examples=60, deadline=None)
@given(think=st.booleans(), reasoning=reasoning_text, answer=answer_text, calls=tool_calls)
def test_round_trip_render_then_parse(think, reasoning, answer, calls):
    msgs = [{"role": "user", "content": with_flag("question", think)},
            {"role": "assistant", "reasoning_content": reasoning, "content": answer,
             "tool_calls": calls}]
    turn = parse_assistant(assistant_part(render(msgs, tools=TOOLS)))
    assert turn.well_formed, turn.reason
    assert turn.thinking == (reasoning if think else "")
    assert turn.answer == answer
    assert turn.tool_calls == calls


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200))
def test_parse_never_raises(text):
    turn = parse_assistant(text)
    assert isinstance(turn.well_formed, bool) and turn.reason


@given(st.text(max_size=40))
def test_flag_helpers_agree(text):
    assert thinking_mode(with_flag(text, True))
    assert not thinking_mode(with_flag(text, False))


# --- a real fast tokenizer -------------------------------------------------------------

@pytest.fixture(scope="module")
def tokenizer():
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = ["what is two plus two", "the answer is four", "add numbers with the tool",
              "reasoning about the question step by step"] * 20
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=list(MARKUP_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                                pad_token="<|im_end|>")
    return install_chat_template(fast)


CHAT = [
    {"role": "user", "content": "what is two plus two /think"},
    {"role": "assistant", "reasoning_content": "old", "content": "four"},
    {"role": "user", "content": "add two and two with the tool /no_think"},
    {"role": "assistant", "content": "", "tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 2}}]},
    {"role": "tool", "content": "4"},
    {"role": "assistant", "content": "the answer is four"},
]


def test_tokenizer_renders_like_render(tokenizer):
    assert tokenizer.chat_template == chat_template()
    for msgs, gen in ((CHAT, False), (CHAT[:3], True)):
        assert tokenizer.apply_chat_template(msgs, tools=TOOLS, tokenize=False,
                                             add_generation_prompt=gen) == render(msgs, TOOLS, gen)


def test_assistant_mask_covers_exactly_the_trained_turns(tokenizer):
    out = tokenizer.apply_chat_template(CHAT, tools=TOOLS, tokenize=True, return_dict=True,
                                        return_assistant_tokens_mask=True)
    ids, mask = out["input_ids"], out["assistant_masks"]
    assert len(ids) == len(mask)
    spans, current = [], []
    for token, m in zip(ids, mask):
        if m:
            current.append(token)
        elif current:
            spans.append(tokenizer.decode(current))
            current = []
    if current:
        spans.append(tokenizer.decode(current))
    assert spans == [
        EMPTY_THINK + '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 2}}\n</tool_call><|im_end|>',
        EMPTY_THINK + "the answer is four<|im_end|>",
    ]  # the historic turn "four" and every user/tool/system token are context only


def test_tool_call_blocks_match_the_lazy_regex_and_stay_linear():
    import re
    import time

    from cascadekit.chat.format import _tool_call_blocks

    lazy = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
    for text in ["a<tool_call>x</tool_call>b<tool_call>y</tool_call>c", "<tool_call><tool_call>x</tool_call>",
                 "<tool_call>x", "x</tool_call><tool_call>y</tool_call>", "", "<tool_call></tool_call>"]:
        assert _tool_call_blocks(text) == (lazy.findall(text), lazy.sub("", text))
    start = time.perf_counter()
    _tool_call_blocks("<tool_call>" * 200_000)
    assert time.perf_counter() - start < 30  # a hang guard (quadratic would take hours), not a speed claim
