"""Base against the probe's edge-RL model on 48 unseen rl-split problems per edge op (8 samples each, temperature 0.7).

Run after probe_edge.py (which saves the trained model to /tmp/edge_model).
"""
import torch

torch.set_num_threads(1)
from cascadekit.evaluation.report import evaluate
from cascadekit.experiments import edge_of_competence as eoc
from cascadekit.experiments.common import load_model, passk_rows, rl_problems
from cascadekit.profiles import apply_overrides, load_profile
from cascadekit.tokenizer import load_tokenizer

profile = apply_overrides(eoc.chapter_profile(load_profile("toy")), {"evaluation.samples": 8})
tokenizer = load_tokenizer("/tmp/edge_model")
# seed offset 1: problems of the rl split that the run (seed offset 0) never drew
problems = rl_problems(profile, [(c, (op, op), 1 / 9) for c in profile.world.contexts for op in (3, 4, 5)], 144,
                       seed_offset=1)
for label, checkpoint in (("base", eoc.base_checkpoint(profile)), ("edge RL", "/tmp/edge_model")):
    rows = passk_rows(evaluate(load_model(checkpoint), tokenizer, problems, profile), 8, by=("op",))
    print(label, [(r["op"], r["problems"], round(r["pass@1"], 3), round(r["pass@8"], 3)) for r in rows], flush=True)
