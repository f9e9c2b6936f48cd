"""Edge arm of chapter 04 again; evaluate its edge problems at temperature 0.7 and 1.0."""
import json, time, torch
torch.set_num_threads(1)
from cascadekit.profiles import load_profile, apply_overrides
from cascadekit.experiments import edge_of_competence as eoc
from cascadekit.experiments.competence import with_bands
from cascadekit.experiments.common import eval_problems, load_model, passk_rows, rl_dataset
from cascadekit.evaluation.report import evaluate
from cascadekit.tokenizer import load_tokenizer
from cascadekit.rewards import strict_reward
from cascadekit.training.grpo import train_grpo

profile = with_bands(eoc.chapter_profile(load_profile("toy")), {"in_distribution": (2, 2), "edge": (3, 5), "hard": (6, 10)})
ckpt = eoc.base_checkpoint(eoc.chapter_profile(load_profile("toy")))
tok = load_tokenizer(ckpt)
problems = eval_problems(profile, [3, 4, 5], profile.world.contexts)
rl_probs = eoc.range_problems(profile, "edge")
def ev(model, label, temp, probs):
    p = apply_overrides(profile, {"evaluation.temperature": temp})
    rec = evaluate(model, tok, probs, p)
    print(label, temp, [(r["op"], round(r["pass@1"], 3), round(r["answer_pass@1"], 3)) for r in passk_rows(rec, 16, by=("op",))], flush=True)
base = load_model(ckpt)
for t in (0.7, 1.0):
    ev(base, "base eval-split", t, problems)
ev(base, "base rl-split(first 24)", 1.0, rl_probs[:24])
res = train_grpo(load_model(ckpt), tok, rl_dataset(rl_probs), strict_reward, profile, "/tmp/probe_edge_run", max_steps=48)
res.model.save_pretrained("/tmp/edge_model"); tok.save_pretrained("/tmp/edge_model")
print("train reward last quarter", res.curves["reward"].tail(12).mean(), flush=True)
for t in (0.7, 1.0):
    ev(res.model, "edge-RL eval-split", t, problems)
ev(res.model, "edge-RL rl-split(first 24)", 1.0, rl_probs[:24])
ev(res.model, "edge-RL rl-split(last 24)", 1.0, rl_probs[-24:])
