"""A byte-level BPE tokenizer trained on the DAG world's own text.

Nothing is downloaded: the vocabulary is learned from a corpus generated from
the profile's data seed, so the same profile always gives the same tokenizer.

Two choices matter for arithmetic:

- Digits are split into runs of at most three before BPE sees them, so a
  number is spelled the same way wherever it appears (``1234`` is ``123`` +
  ``4``) and the model never has to learn one token per value.
- The tags that structure a solution (``<question>``, ``<solution>``,
  ``<answer>`` and their closers) are single special tokens: the sampler stops
  on ``</answer>`` as one id, and BPE never merges a tag with its neighbours.

The world's text uses a few hundred distinct words, so byte-level BPE runs
out of merges long before a large vocabulary (about 713 tokens on the full
rendering): the trained vocabulary can be smaller than asked, and
:func:`train_tokenizer` reports the size it reached instead of padding it.
"""
from __future__ import annotations

from typing import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from cascadekit.profiles import Profile
from cascadekit.engine.runtime import load_tokenizer  # re-exported: a checkpoint folder's or a hub model's tokenizer
from cascadekit.world import generate_problems

EOS = "<|endoftext|>"
PAD = "<|pad|>"
TAGS = ("<question>", "</question>", "<solution>", "</solution>", "<answer>", "</answer>")
SPECIAL_TOKENS = (EOS, PAD, *TAGS)


def _pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    """Isolate digit runs of at most 3 (with their leading space), then byte-level split the rest."""
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r" ?\d{1,3}"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """Train byte-level BPE on ``texts``; the result may hold fewer than ``vocab_size`` tokens."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = _pre_tokenizer()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return wrap(tok)


def wrap(tok: Tokenizer) -> PreTrainedTokenizerFast:
    """Wrap a raw ``tokenizers.Tokenizer`` for transformers (left padding, for generation)."""
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS,
        pad_token=PAD,
        padding_side="left",
        model_max_length=1_000_000,
    )


def corpus_texts(profile: Profile) -> list[str]:
    """The tokenizer's corpus: ``corpus_problems`` problems spread over every op and context."""
    world = profile.world
    ops = range(world.ops_in_distribution[0], world.ops_hard[1] + 1)
    problems = generate_problems(
        ops=ops, contexts=tuple(world.contexts), n=profile.tokenizer.corpus_problems,
        seed=profile.seeds.data, split="pretrain", style=world.rendering,
    )
    return [p.training_text for p in problems]


def build_tokenizer(profile: Profile) -> PreTrainedTokenizerFast:
    """Train the profile's tokenizer from its generated corpus."""
    return train_tokenizer(corpus_texts(profile), profile.tokenizer.vocab_size)


def tag_id(tokenizer: PreTrainedTokenizerFast, tag: str) -> int:
    """The single token id of a tag such as ``</answer>``."""
    ids = tokenizer.convert_tokens_to_ids([tag])
    if not ids or ids[0] is None or ids[0] == tokenizer.unk_token_id:
        raise KeyError(f"{tag!r} is not a token of this tokenizer")
    return ids[0]
