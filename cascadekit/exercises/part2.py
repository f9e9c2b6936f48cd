"""Exercises for Part II (chapters 08-10): the unified thinking model, RLHF and IF-RL."""
from __future__ import annotations

from cascadekit.exercises import Exercise
from cascadekit.exercises.answers import Case, Choice, Function, Number
from cascadekit.exercises.committed import committed_metrics

DOMAINS = ("math", "code", "tools", "swe", "instructions", "general")


def _row(chapter: str, stage: str, domain: str, mode: str) -> dict:
    """The stage-table row of one stage, domain and mode (stage names may hold commas)."""
    return next(r for r in committed_metrics(chapter)["rows"]
                if (r["stage"], r["domain"], r["mode"]) == (stage, domain, mode))


# 08 · a unified thinking model ----------------------------------------------

def _weakest_think_domain() -> str:
    rows = [r for r in committed_metrics("08_unified_thinking_model")["rows"]
            if r["stage"] == "SFT stage 2" and r["mode"] == "think"]
    return min(rows, key=lambda r: r["score"])["domain"]


def _math_length_ratio() -> float:
    think = _row("08_unified_thinking_model", "SFT stage 2", "math", "think")
    no_think = _row("08_unified_thinking_model", "SFT stage 2", "math", "no_think")
    return think["mean_tokens"] / no_think["mean_tokens"]


# 09 · reward model and RLHF -------------------------------------------------

def _bt_loss(chosen: float, rejected: float) -> float:
    import torch

    return float(-torch.nn.functional.logsigmoid(torch.tensor(chosen - rejected, dtype=torch.float64)))


def _accuracy_gain() -> float:
    models = committed_metrics("09_rlhf")["reward_models"]
    return models["4"]["held_out"]["accuracy"] - models["1"]["held_out"]["accuracy"]


# 10 · IF-RL -----------------------------------------------------------------

def _max_words_cases() -> list[Case]:
    texts = ("", "one", "Two words.", "it's a don't-stop e-mail", "snake_case counts as one", "3 + 4 = 7",
             "Ünïcödé wörds ça va", "\n\n  spaced   out \t words \n", "a, b, c, d, e, f", "word " * 21)
    return [(t, n) for t in texts for n in (3, 5)]


def _max_words(text: str, n: int) -> bool:
    from cascadekit.verify.instructions import MaxWords

    return MaxWords(n).check(text)


def _if_rl_gain() -> float:
    before = _row("10_if_rl", "RLHF half-half", "instructions", "no_think")
    after = _row("10_if_rl", "IF-RL no_think, verifier", "instructions", "no_think")
    return after["score"] - before["score"]


EXERCISES = [
    Exercise("08.1", "The weakest domain after SFT",
             "In the committed stage table (`load_metrics(\"08_unified_thinking_model\")[\"rows\"]`), which domain "
             "has the lowest think-mode score after SFT stage 2? One of " + ", ".join(repr(d) for d in DOMAINS) + ".",
             Choice(DOMAINS, _weakest_think_domain), "keep the rows with `stage == \"SFT stage 2\"` and "
             "`mode == \"think\"`, then compare `score`.", "answer = None  # a domain"),
    Exercise("08.2", "How much longer is thinking?",
             "In the same table, how many times longer (mean tokens) are math answers after `/think` than after "
             "`/no_think`, after SFT stage 2? Within 2%. Is that the gap you expected from the chat format?",
             Number(_math_length_ratio, rel=0.02), "divide the think row's `mean_tokens` by the no_think row's, "
             "both for math after SFT stage 2.", "answer = None  # a ratio"),
    Exercise("09.1", "Implement the Bradley-Terry loss",
             "Write `bt_loss(chosen, rejected)`: the reward model's loss on one preference pair whose rewards are "
             "`chosen` and `rejected` (floats). It must not overflow when the two rewards are hundreds apart.",
             Function(lambda: [(1.0, 0.0), (0.0, 1.0), (2.5, 2.5), (-3.0, 4.0), (40.0, -40.0), (-400.0, 400.0)],
                      _bt_loss, rel=1e-6, abs_=1e-9),
             "-log σ(chosen - rejected). Written as softplus(rejected - chosen) = log(1 + e^x), compute it as "
             "max(x, 0) + log1p(e^-|x|) so that e^x never overflows.",
             "import math\n\ndef bt_loss(chosen, rejected):\n    ...\n\nanswer = bt_loss", homework=True),
    Exercise("09.2", "Does a larger reward model rank better?",
             "In the committed run (`reward_models`), by how much is the 4-layer reward model's held-out pairwise "
             "accuracy above the 1-layer one's (4-layer minus 1-layer)? Within 0.005. Does its interval overlap "
             "the smaller model's?",
             Number(_accuracy_gain, abs_=0.005), "each reward model's `held_out` record has its `accuracy`; the "
             "keys of `reward_models` are the layer counts as strings.", "answer = None  # a difference"),
    Exercise("10.1", "A verifier rule: at most n words",
             "Write `max_words_ok(text, n)`: True when `text` obeys \"Use at most n words.\" exactly as the kit's "
             "strict instruction verifier counts words.",
             Function(_max_words_cases, _max_words,
                      describe_case=lambda case: f"{case[0][:30]!r}, n={case[1]}"),
             "the verifier counts runs of word characters (the regular expression `\\w+`), so punctuation splits "
             "words and underscores do not.", "def max_words_ok(text, n):\n    ...\n\nanswer = max_words_ok"),
    Exercise("10.2", "What IF-RL bought",
             "In the committed run, by how much did the instruction-following score in `/no_think` change from the "
             "RLHF checkpoint to the `IF-RL no_think, verifier` arm (after minus before)? Within 0.005.",
             Number(_if_rl_gain, abs_=0.005), "two rows of `load_metrics(\"10_if_rl\")[\"rows\"]`: domain "
             "instructions, mode no_think, stages `RLHF half-half` and `IF-RL no_think, verifier`.",
             "answer = None  # a change in score", homework=True),
]
