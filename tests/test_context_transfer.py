"""Finding 2's recipe: B's exposure counted in tokens, B only at op 2, identical RL for every variant."""
from __future__ import annotations

import pytest

from cascadekit.chapters import resolve, write
from cascadekit.chapters import ch05_context_transfer as ct
from cascadekit.profiles import load_profile
from cascadekit.results import ResultsWriter, load_metrics

FOLDER = "05_context_transfer"

LENGTHS = {"source": 114.0, "B": 91.0}


def length(context: str) -> float:
    return LENGTHS["B" if context == ct.TARGET else "source"]


@pytest.fixture(scope="module")
def smoke():
    return resolve("05", "smoke").profile


@pytest.fixture(scope="module")
def tokenizer(smoke):
    from cascadekit.training.pretrain import cached_tokenizer

    return cached_tokenizer(smoke)


@pytest.mark.parametrize("b_share", [0.001, 0.01, 0.1])
def test_mixture_gives_b_its_share_of_tokens(b_share):
    mixture = ct.exposure_mixture((2, 5), b_share, LENGTHS)
    *sources, b = mixture.components
    assert [(a.context, a.ops) for a in sources] == [(c, (2, 5)) for c in ct.SOURCES] and (b.context, b.ops) == ("B", (2, 2))
    assert len({a.share for a in sources}) == 1  # the sources in equal shares
    tokens = {c.context: c.share * length(c.context) for c in mixture.components}
    assert tokens["B"] / sum(tokens.values()) == pytest.approx(b_share, rel=1e-12)
    assert b.share > b_share  # B problems are shorter, so more of them


def test_no_exposure_means_no_b_component():
    components = ct.exposure_mixture((2, 5), 0.0, LENGTHS).components
    assert [(c.context, c.ops, c.share) for c in components] == [(c, (2, 5), 1 / len(ct.SOURCES)) for c in ct.SOURCES]


@pytest.mark.parametrize("b_share", ct.B_SHARES)
def test_corpus_holds_b_at_op_2_only_at_its_token_share(smoke, tokenizer, b_share):
    tokens = 60_000
    problems = ct.pretraining_corpus(smoke, tokenizer, b_share, tokens=tokens)
    stats = ct.corpus_stats(problems, tokenizer, b_share)
    assert stats.a_ops == tuple(smoke.world.ops("in_distribution"))
    assert stats.b_ops == ((ct.B_OP,) if stats.b_problems else ())
    assert stats.tokens == pytest.approx(tokens, rel=0.05)
    # whole problems: rounding moves B by less than one problem, and the sampled B problems'
    # lengths differ a little from the probed mean; allow one and a half problems' tokens
    one_problem = ct.component_lengths(smoke, tokenizer)[ct.TARGET] / stats.tokens
    assert abs(stats.actual_b_share - b_share) <= max(0.1 * b_share, 1.5 * one_problem)
    assert len({p.key for p in problems}) == len(problems)


def test_rl_prompts_are_half_b_over_the_whole_range_and_identical_across_variants(smoke):
    first, second = ct.rl_mixture_problems(smoke), ct.rl_mixture_problems(smoke)
    assert [p.key for p in first] == [p.key for p in second]
    assert len(first) == smoke.rl.samples
    assert sum(p.context == "B" for p in first) == smoke.rl.samples // 2
    assert {p.op for p in first if p.context == "B"} == set(smoke.world.ops("in_distribution"))


def test_variant_key_depends_on_exposure_and_pretraining_only(smoke):
    keys = {ct.variant_key(smoke, b) for b in ct.B_SHARES}
    assert len(keys) == len(ct.B_SHARES)
    evaluation_changed = resolve("05", "smoke", {"evaluation.samples": 8}).profile
    assert ct.variant_key(evaluation_changed, 0.01) == ct.variant_key(smoke, 0.01)
    assert ct.variant_key(resolve("05", "smoke", {"pretrain.tokens": 123}).profile, 0.01) != ct.variant_key(smoke, 0.01)


def test_toy_chapter_pretrains_each_variant_on_the_base_budget_and_user_overrides_win():
    toy = resolve("05", "toy")
    assert toy.profile.pretrain == load_profile("toy").pretrain  # half the budget showed nothing: chapters.yaml
    assert toy.profile.evaluation.samples == toy.settings["evaluation.samples"]
    assert resolve("05", "toy", {"pretrain.tokens": 5}).profile.pretrain.tokens == 5


def _samples(b_share: float, solved: int, problems: int = 10, n: int = 4) -> list[dict]:
    """After-RL records of B at op 3: the first ``solved`` problems right in every sample."""
    return [{"context": "B", "op": 3, "range": "in_distribution", "problem": i, "sample": s, "correct": i < solved,
             "n_dependency": 0, "n_missing": 0} for i in range(problems) for s in range(n)]


def _fake_metrics() -> dict:
    def rows(context, value):
        return [{"context": context, "op": op, "pass@1": value / 2, "pass@4": value} for op in (2, 3)]

    return {"samples_per_problem": 4, "variants": [
        {"b_share": b, "corpus": {"actual_b_share": b}, "before": rows("B", 0.0),
         "after": rows("A", 0.9) + rows("B", v), "rl_curves": [{"step": 1, "reward": 0.1}],
         "samples": _samples(b, solved)}
        for b, v, solved in ((0.0, 0.0, 0), (0.001, 0.0, 0), (0.01, 0.5, 8), (0.1, 0.5, 9))]}


def test_tables_and_figures_from_metrics(tmp_path):
    metrics = _fake_metrics()
    rows = ct.summary_rows(metrics)
    assert [(r["b_share"], r["op"], r["pass@4 after"]) for r in rows][-2:] == [("10.0%", 2, 0.5), ("10.0%", 3, 0.5)]
    paper = ct.paper_vs_run_rows(metrics)
    assert paper[3]["op 3 pass@4 before/after"] == "0.00 / 0.50"
    write("05", metrics, ResultsWriter(FOLDER, "smoke", "test", out=tmp_path))
    folder = tmp_path / FOLDER
    assert {p.name for p in folder.iterdir()} >= {"metrics.json", "paper_vs_run.md", "transfer_b.png",
                                                  "transfer_a.png", "rl_reward.png", "samples.jsonl.gz"}
    kept = load_metrics(FOLDER, root=tmp_path)
    assert kept["paper_vs_run"] == ct.claims(metrics) and not any("samples" in v for v in kept["variants"])


def test_claims_pair_the_exposures_on_the_same_problems():
    rows = {r["claim"].split(": ")[1]: r["verdict"] for r in ct.claims(_fake_metrics())}
    assert rows == {"0.1% minus 0.0% exposure": "reproduced", "1.0% minus 0.1% exposure": "reproduced",
                    "10.0% minus 0.1% exposure": "reproduced"}
    partial = {**_fake_metrics(), "variants": _fake_metrics()["variants"][2:]}
    assert ct.claims(partial) == []  # no unexposed variant ran: nothing to compare


@pytest.mark.slow
def test_toy_reproduction_runs_and_measures_the_exposures(tmp_path):
    """The toy run end to end. It asserts what the design guarantees (the exposures and the
    identical RL), not the direction of the finding, which the committed results report."""
    config = resolve("05", "toy")
    profile = config.profile
    metrics = ct.run(config, tmp_path)
    for variant in metrics["variants"]:
        corpus = variant["corpus"]
        assert corpus["b_ops"] == ([ct.B_OP] if corpus["b_share"] else [])
        assert corpus["actual_b_share"] == pytest.approx(corpus["b_share"], rel=0.1, abs=1e-9)
        assert variant["rl_steps"] == profile.rl.samples // profile.rl.prompts_per_step
        assert {r["op"] for r in variant["after"] if r["context"] == "B"} == set(profile.world.ops("in_distribution"))
