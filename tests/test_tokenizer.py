import pytest

from cascadekit.profiles import load_profile
from cascadekit.engine.tokenizer import SPECIAL_TOKENS, TAGS, build_tokenizer, load_tokenizer, tag_id, train_tokenizer
from cascadekit.world import generate_problems


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    problems = generate_problems(ops=range(2, 6), contexts=("A", "B", "C"), n=120, seed=0, style="compact")
    return [p.training_text for p in problems]


@pytest.fixture(scope="module")
def tokenizer(corpus):
    return train_tokenizer(corpus, 500)


def test_round_trip_is_exact(tokenizer, corpus):
    for text in corpus[:20]:
        assert tokenizer.decode(tokenizer(text)["input_ids"]) == text


def test_tags_are_single_tokens(tokenizer, corpus):
    tokens = tokenizer.convert_ids_to_tokens(tokenizer(corpus[0])["input_ids"])
    for tag in TAGS:
        assert tokens.count(tag) == 1
        assert tokenizer.convert_ids_to_tokens([tag_id(tokenizer, tag)]) == [tag]


def test_digits_grouped_in_runs_of_at_most_three(tokenizer):
    tokens = tokenizer.convert_ids_to_tokens(tokenizer(" 1234567 = 89")["input_ids"])
    digit_runs = [t.lstrip("Ġ") for t in tokens if t.lstrip("Ġ").isdigit()]
    assert "".join(digit_runs) == "123456789"
    assert all(len(run) <= 3 for run in digit_runs)
    assert all(t.lstrip("Ġ").isdigit() or t in ("Ġ=",) for t in tokens)


def test_vocabulary_saturates_below_a_large_request(corpus):
    tok = train_tokenizer(corpus, 50_000)
    assert len(SPECIAL_TOKENS) + 256 < len(tok) < 50_000


def test_special_ids_and_left_padding(tokenizer):
    assert tokenizer.eos_token_id == 0 and tokenizer.pad_token_id == 1
    assert tokenizer.padding_side == "left"
    batch = tokenizer(["<answer> 1 </answer>", "<answer>"], padding=True)["input_ids"]
    assert batch[1][0] == tokenizer.pad_token_id


def test_save_and_load_give_the_same_ids(tokenizer, corpus, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    again = load_tokenizer(tmp_path)
    assert again(corpus[0])["input_ids"] == tokenizer(corpus[0])["input_ids"]
    assert again.padding_side == "left" and again.eos_token == tokenizer.eos_token


def test_profile_tokenizer_is_deterministic():
    profile = load_profile("smoke")
    a, b = build_tokenizer(profile), build_tokenizer(profile)
    assert a.get_vocab() == b.get_vocab()
    assert len(a) <= profile.tokenizer.vocab_size


def test_unknown_tag_is_an_error(tokenizer):
    with pytest.raises(KeyError):
        tag_id(tokenizer, "<nope>")
