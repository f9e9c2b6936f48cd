"""General chat: requests about the world's quantities, scored by a hidden quality function.

Stands in for ArenaHard. The prompt is the world's DAG problem text, then one
request in one of four fixed phrasings, answered by one regular sentence and a
polite close drawn from :data:`CLOSES`:

============  ==================================  ==========================================
request       prompt ends with                    gold response
============  ==================================  ==========================================
describe      ``Describe sharks.``                the problem's sentence for it: ``Sharks
                                                  equals 3 more than the sum of tigers and
                                                  eagles. Hope this helps.``
list          ``List what sharks depends on.``    ``Sharks depends on tigers and eagles.``
compare       ``Which is larger, tigers or        ``Eagles is larger: 10 against 1.`` (two
              eagles?``                           given numbers, so the problem states both)
summarise     ``Summarise the problem.``          ``It has 3 quantities; the question asks
                                                  for sharks.``
============  ==================================  ==========================================

:func:`quality` is the hidden ground truth of a response's quality, the part a
strong LLM judge plays in ArenaHard and human raters play in the paper's
preference data. With *correctness* the share of the request's facts the
response states (the quantity it is about, the ones it depends on, the number,
the relation), and zero when it leaves out the quantity asked about, names one
that does not belong, or puts the larger quantity second::

    quality = correctness * (0.4 + 0.2 * concision + 0.2 * no_repetition + 0.2 * close)

* concision: 1 up to the gold response's word count, falling linearly to 0 at
  twice it;
* no_repetition: the share of distinct word trigrams;
* close: 1 if the response ends with one of :data:`CLOSES`.

So a wrong answer scores 0 however polished, and a fully right one at least 0.4:
style can only rank right answers, which is the behaviour the paper says RLHF
buys (less verbosity and repetition). :func:`judge` reports it as the score,
with the parts in the details.

With ``domains.general_teacher`` a share of the answers is written as a teacher
distils them (:func:`distil`: the request restated, padding, sometimes the answer
twice, closes :func:`quality` does not count, rarely a fact wrong), as the paper's
SFT answers come from large teacher models; ``gold["length"]`` stays the concise
answer's, so such an answer scores below the concise one and RLHF has style to cut.

:func:`preference_pairs` makes the (chosen, rejected) pairs chapter 09's
reward model trains on, by perturbing the gold response (a wrong fact, verbose
padding, a repeated sentence, no close, a truncation) and ordering each pair by
:func:`quality`. The reward model sees only the pairs, never :func:`quality`:
like a reward model trained on human preferences, it must infer what makes an
answer better. Departures from the paper: the requests are templated facts
about one small problem, not open-ended user prompts, and the ground truth is a
formula rather than human or LLM judgement.
"""
from __future__ import annotations

import random
import re
from itertools import combinations
from typing import Any, Sequence

from cascadekit.domains.task import Judgement, Task
from cascadekit.domains.dag import Dag, draw_dag

REQUESTS = ("describe", "list", "compare", "summarise")
CLOSES = ("Hope this helps.", "Glad to help.", "Happy to help.")
BASE_WEIGHT = 0.4  # of a correct answer, whatever its style
WEIGHTS = {"concision": 0.2, "no_repetition": 0.2, "close": 0.2}
PADDING = "I read the whole problem with care before answering."
#: A teacher's padding sentences (:func:`distil`); none names a quantity, a number or a relation.
TEACHER_PADDING = (PADDING, "Let me go through the problem first.", "This follows directly from the problem text.",
                   "That is what the problem says.")
#: Closes a teacher adds besides :data:`CLOSES`; the hidden quality gives them no credit.
TEACHER_CLOSES = ("Let me know if anything is unclear.", "I hope that answers your question.")
TEACHER_REPEAT = 0.3  # the share of a teacher's answers that say the answer sentence twice
TEACHER_SLIP = 0.05  # the share of a teacher's answers with one fact wrong: facts mostly right
MAX_RESPONSE_CHARS = 1_000_000  # longer responses are not judged (score 0)
MAX_GOLD_ITEMS = 100
MAX_GOLD_LENGTH = 10_000

# The phrase a statement's relation is named by, and the wrong one a perturbation puts in its place.
_RELATION = {
    "plus": "more than", "times": "times", "difference": "difference", "product": "product",
    "sum": "sum", "scaled_sum": "times the sum", "shifted_sum": "more than the sum",
}
_WRONG_RELATION = {
    "more than": "times", "times": "more than", "difference": "sum", "product": "sum", "sum": "product",
    "times the sum": "more than the sum", "more than the sum": "times the sum",
}
_WORD = re.compile(r"\w+")


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _listing(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _statement(dag: Dag, index: int, display: Sequence[str]) -> str:
    """The problem text's sentence defining node ``index``."""
    head = f"{display[index]} equals ".lower()
    return next(s for s in re.split(r"(?<=\.) ", dag.problem.problem_text) if s.lower().startswith(head))


def _request(dag: Dag, rng: random.Random) -> tuple[str, str, str, dict[str, Any]]:
    """One request about ``dag``: its prompt sentence, the thinking, the answer body, and the gold facts."""
    display = [s.split(" = ", 1)[0] for s in dag.steps()]  # names as the text writes them mid-sentence
    names, nodes, values = [d.lower() for d in display], dag.graph.nodes, dag.values()
    distinct = [(a, b) for a, b in combinations(dag.leaves, 2) if values[a] != values[b]]
    request = rng.choice([k for k in REQUESTS if k != "compare" or distinct])

    def formula(i: int) -> str:
        return f"{display[i]} = {values[i] if nodes[i].kind == 'leaf' else dag.expression(i, display)}."

    def gold(subject: int, mentions: Sequence[int], facts: list[str], order: list[list[str]]) -> dict[str, Any]:
        return {"request": request, "names": names, "subject": names[subject],
                "mentions": [names[i] for i in mentions], "facts": facts, "order": order}

    if request == "describe":
        i = rng.choice([i for i, n in enumerate(nodes) if n.kind != "total"])
        node = nodes[i]
        if node.kind == "leaf":
            facts = [str(node.value)]
        else:
            facts = ([] if node.const is None else [str(node.const)]) + [_RELATION[node.kind]]
        return (f"Describe {display[i]}.", formula(i), _statement(dag, i, display),
                gold(i, [i, *node.parents], facts, []))
    if request == "list":
        i = rng.choice(dag.computed)
        parents = nodes[i].parents
        return (f"List what {display[i]} depends on.", formula(i),
                f"{_cap(display[i])} depends on {_listing([display[p] for p in parents])}.",
                gold(i, [i, *parents], [], []))
    if request == "compare":
        a, b = rng.choice(distinct)
        if rng.random() < 0.5:
            a, b = b, a
        big, small = (a, b) if values[a] > values[b] else (b, a)
        vb, vs = str(values[big]), str(values[small])
        return (f"Which is larger, {display[a]} or {display[b]}?", f"{formula(a)} {formula(b)}",
                f"{_cap(display[big])} is larger: {vb} against {vs}.",
                gold(big, [big], [vb, vs], [[names[big], names[small]], [vb, vs]]))
    count, query = len(nodes), len(nodes) - 1
    return ("Summarise the problem.",
            f"The quantities are {_listing(display)}. That makes {count}. The question asks for {display[query]}.",
            f"It has {count} quantities; the question asks for {display[query]}.",
            gold(query, [query], [str(count)], []))


def _restatement(gold: dict[str, Any]) -> str:
    """A teacher's opening: the request said back, naming no quantity but the subject (so no fact moves)."""
    return {"describe": f"You asked me to describe {gold['subject']}.",
            "list": f"You asked what {gold['subject']} depends on.",
            "compare": "You asked which of the two is larger.",
            "summarise": "You asked for a summary of the problem."}[gold["request"]]


def distil(body: str, gold: dict[str, Any], rng: random.Random) -> str:
    """``body`` (the concise answer sentence) as a teacher writes it: see :data:`TEACHER_PADDING` and the rates below.

    The request restated, the body (said twice at :data:`TEACHER_REPEAT`, with one fact
    wrong at :data:`TEACHER_SLIP`), one padding sentence, and a close from
    :data:`CLOSES` or :data:`TEACHER_CLOSES` (which the hidden quality does not count).
    """
    if rng.random() < TEACHER_SLIP:
        body = _wrong_fact(gold, body, rng) or body
    said = [body, body] if rng.random() < TEACHER_REPEAT else [body]
    return " ".join([_restatement(gold), *said, rng.choice(TEACHER_PADDING), rng.choice(CLOSES + TEACHER_CLOSES)])


def make_task(rng: random.Random, ops: Sequence[int], teacher: float = 0.0) -> Task:
    """The DAG problem text, then one request about its quantities, answered politely.

    ``teacher`` (``domains.general_teacher``) is the share of answers a teacher writes
    (:func:`distil`), drawn from a generator of the prompt's own, so the prompts stay as
    they are; ``gold["length"]`` is the concise answer's, which :func:`quality` measures
    concision against.
    """
    dag = draw_dag(rng, ops)
    sentence, thinking, body, gold = _request(dag, rng)
    response = f"{body} {rng.choice(CLOSES)}"
    gold["length"] = len(_WORD.findall(response))
    prompt = f"{dag.problem.problem_text} {sentence}"
    if teacher:
        draw = random.Random(f"teacher/{prompt}")
        if draw.random() < teacher:
            response = distil(body, gold, draw)
    return Task(domain="general", prompt=prompt, thinking=thinking, answer=response, no_think_answer=response,
                gold=gold)


# --- the hidden quality function ------------------------------------------------------------

def check_gold(gold: Any) -> None:
    """ValueError naming the domain and the field if ``gold`` is not a well-formed general record."""
    def bad(field: str, why: str) -> ValueError:
        return ValueError(f"general gold: field {field!r} {why}")

    def strings(field: str, value: Any) -> list[str]:
        if not isinstance(value, list) or len(value) > MAX_GOLD_ITEMS or not all(
                isinstance(v, str) and v.strip() for v in value):
            raise bad(field, f"must be a list of at most {MAX_GOLD_ITEMS} non-empty strings")
        return value

    if not isinstance(gold, dict):
        raise ValueError(f"general gold: must be a dict, got {type(gold).__name__}")
    for field in ("request", "names", "subject", "mentions", "facts", "order", "length"):
        if field not in gold:
            raise bad(field, "is missing")
    if gold["request"] not in REQUESTS:
        got = repr(gold["request"])[:60] if isinstance(gold["request"], str) else type(gold["request"]).__name__
        raise bad("request", f"must be one of {', '.join(REQUESTS)}, got {got}")
    names = strings("names", gold["names"])
    if not names:
        raise bad("names", "is empty")
    if gold["subject"] not in names:
        raise bad("subject", "must be one of the names")
    mentions = strings("mentions", gold["mentions"])
    if gold["subject"] not in mentions or not set(mentions) <= set(names):
        raise bad("mentions", "must be names, the subject among them")
    strings("facts", gold["facts"])
    order = gold["order"]
    if not isinstance(order, list) or not all(
            isinstance(pair, list) and len(pair) == 2 and all(isinstance(v, str) and v.strip() for v in pair)
            for pair in order):
        raise bad("order", "must be a list of [first, second] string pairs")
    length = gold["length"]
    if not isinstance(length, int) or isinstance(length, bool) or not 1 <= length <= MAX_GOLD_LENGTH:
        raise bad("length", f"must be an integer from 1 to {MAX_GOLD_LENGTH}")


def _answer(response: str) -> str:
    """The answer the judge reads: the text after the turn's last ``</think>``, up to ``<|im_end|>``.

    Departs from :func:`cascadekit.verify.boxed.answer_part` (the chat format's
    reading, where only a leading think block is structure) on malformed turns
    alone: 1.2% of the shipped policy samples (246 of 20,400) close a think block
    twice or close one never opened, and this judge reads their last words, as it did
    when the shipped reward models' preference pairs were drawn (reading them the
    other way re-keys every Part II stage from the reward model on). The format
    check, not this judge, scores such a turn's form. Move to ``answer_part`` when
    the Part II chain is rebuilt.
    """
    if "</think>" in response:
        response = response.rsplit("</think>", 1)[1]
    elif "<think>" in response:
        return ""
    return response.split("<|im_end|>", 1)[0].strip()


def _first_mentions(text: str, names: Sequence[str]) -> dict[str, int]:
    """Where each name is first mentioned (case-insensitive, whole words; the longest name wins an overlap)."""
    pattern = "|".join(re.escape(n) for n in sorted(set(names), key=len, reverse=True))
    first: dict[str, int] = {}
    for match in re.finditer(rf"(?<!\w)(?:{pattern})(?!\w)", text, re.IGNORECASE):
        first.setdefault(match.group().lower(), match.start())
    return first


def _position(item: str, text: str, mentioned: dict[str, int]) -> int | None:
    """Where a fact first appears: a name by :func:`_first_mentions`, a number or phrase as a whole token."""
    if item.lower() in mentioned:
        return mentioned[item.lower()]
    edge = r"\d" if item.isdigit() else r"\w"
    match = re.search(rf"(?<!{edge}){re.escape(item)}(?!{edge})", text, re.IGNORECASE)
    return None if match is None else match.start()


def _correctness(gold: dict[str, Any], text: str) -> float:
    """Share of the gold mentions and facts ``text`` states.

    0 without the subject, with a name that is neither a mention nor in an
    ``order`` pair (the smaller of a comparison may be named, need not be), or
    with an ``order`` pair's second item before its first.
    """
    mentioned = _first_mentions(text, gold["names"])
    allowed = {m.lower() for m in [*gold["mentions"], *(item for pair in gold["order"] for item in pair)]}
    if gold["subject"].lower() not in mentioned or set(mentioned) - allowed:
        return 0.0
    for first, second in gold["order"]:
        a, b = _position(first, text, mentioned), _position(second, text, mentioned)
        if a is None or (b is not None and b < a):
            return 0.0
    items = [*gold["mentions"], *gold["facts"]]
    return sum(_position(item, text, mentioned) is not None for item in items) / len(items)


def quality_parts(gold: dict[str, Any], response: str) -> dict[str, float]:
    """The four parts of :func:`quality` for the answer after the think block (gold as :func:`check_gold` wants)."""
    text = _answer(response)
    words = [w.lower() for w in _WORD.findall(text)]
    trigrams = [tuple(words[i:i + 3]) for i in range(len(words) - 2)]
    extra = max(0, len(words) - gold["length"])
    return {
        "correctness": _correctness(gold, text),
        "concision": max(0.0, 1 - extra / gold["length"]),
        "no_repetition": len(set(trigrams)) / len(trigrams) if trigrams else 1.0,
        "close": float(any(text.lower().endswith(c.lower()) for c in CLOSES)),
    }


def quality(gold: dict[str, Any], response: str) -> float:
    """The hidden ground-truth quality of ``response`` in [0, 1] (see the module docstring).

    0 for a response that is not a string or is longer than :data:`MAX_RESPONSE_CHARS`;
    ValueError for a malformed ``gold``.
    """
    check_gold(gold)
    if not isinstance(response, str) or len(response) > MAX_RESPONSE_CHARS:
        return 0.0
    return _combine(quality_parts(gold, response))


def _combine(p: dict[str, float]) -> float:
    return p["correctness"] * (BASE_WEIGHT + sum(w * p[k] for k, w in WEIGHTS.items()))


def judge(gold: Any, completion: Any) -> Judgement:
    """:func:`quality` as the score, its parts in the details; never raises."""
    try:
        check_gold(gold)
    except ValueError as err:
        return Judgement(0.0, str(err))
    if not isinstance(completion, str) or len(completion) > MAX_RESPONSE_CHARS:
        return Judgement(0.0, f"not a string of at most {MAX_RESPONSE_CHARS:,} characters")
    p = quality_parts(gold, completion)
    score = _combine(p)
    if p["correctness"] == 0.0:
        reason = "wrong: the subject is missing, a stray quantity is named or the order is wrong"
    elif p["correctness"] < 1.0:
        reason = "partly right: some facts are missing"
    elif score < 1.0:
        reason = "right, but " + ", ".join(f"{k} {p[k]:.2f}" for k in WEIGHTS if p[k] < 1.0)
    else:
        reason = "right, concise, polite"
    return Judgement(score, reason, p)


# --- preference pairs for the reward model ----------------------------------------------------

def _replace(text: str, mapping: dict[str, str]) -> str:
    """``text`` with each whole-word key of ``mapping`` (case-insensitive) replaced at once, capitals kept."""
    pattern = "|".join(re.escape(k) for k in sorted(mapping, key=len, reverse=True))
    lower = {k.lower(): v for k, v in mapping.items()}

    def swap(match: re.Match) -> str:
        new = lower[match.group().lower()]
        return _cap(new) if match.group()[:1].isupper() else new

    return re.sub(rf"(?<!\w)(?:{pattern})(?!\w)", swap, text, flags=re.IGNORECASE)


def _wrong_fact(gold: dict[str, Any], body: str, rng: random.Random) -> str | None:
    """``body`` with one fact made wrong (the order of a comparison swapped), or None if none can be."""
    if gold["order"]:
        return _replace(body, {k: v for a, b in gold["order"] for k, v in ((a, b), (b, a))})
    strays = [n for n in gold["names"] if n not in gold["mentions"]]
    options = [(f, str(int(f) + 1)) for f in gold["facts"] if f.isdigit()]
    options += [(f, _WRONG_RELATION[f]) for f in gold["facts"] if f in _WRONG_RELATION]
    options += [(m, rng.choice(strays)) for m in gold["mentions"] if m != gold["subject"] and strays]
    if not options:
        return None
    old, new = rng.choice(options)
    return _replace(body, {old: new})


def perturbations(task: Task, rng: random.Random) -> dict[str, str]:
    """Worse versions of a general task's gold response, by name.

    ``wrong_fact`` (a comparison reversed, a number off by one, the wrong
    relation, or a stray quantity for a named one) only where one can be made:
    a list request whose every other quantity is a parent has none.
    """
    close = next(c for c in CLOSES if task.answer.endswith(c))
    body = task.answer[:-len(close)].rstrip()
    words = task.answer.split()
    out = {
        "verbose": f"{body} {PADDING} {close}",
        "repeated": f"{body} {body} {close}",
        "no_close": body,
        "truncated": " ".join(words[:max(1, len(words) // 2)]),
    }
    wrong = _wrong_fact(task.gold, body, rng)
    if wrong is not None and wrong != body:
        out["wrong_fact"] = f"{wrong} {close}"
    return out


def preference_pairs(task: Task, rng: random.Random, n: int) -> list[tuple[str, str]]:
    """Up to ``n`` distinct ``(chosen, rejected)`` pairs among the gold response and its perturbations.

    Each pair's chosen response has strictly higher :func:`quality` than its
    rejected one (ties are left out: they teach a reward model nothing). This is
    how chapter 09's reward-model data is made; the reward model trains on the
    pairs and never sees :func:`quality` itself.
    """
    candidates = list(dict.fromkeys([task.answer, *perturbations(task, rng).values()]))
    scored = [(quality(task.gold, c), c) for c in candidates]
    pairs = [(a, b) if qa > qb else (b, a) for (qa, a), (qb, b) in combinations(scored, 2) if qa != qb]
    return rng.sample(pairs, min(n, len(pairs)))
