"""Is the toy hard range really out of reach? pass@k up to 128 at ops 6-7 on the 16M and 32M bases."""
import torch
torch.set_num_threads(1)
from cascadekit.profiles import load_profile
from cascadekit.experiments import edge_of_competence as eoc
from cascadekit.experiments.common import eval_problems, load_model
from cascadekit.evaluation.report import evaluate, passk_table
from cascadekit.tokenizer import load_tokenizer

for tokens in (16_000_000, 32_000_000):
    profile = eoc.chapter_profile(load_profile("toy"), {"pretrain.tokens": tokens, "evaluation.samples": 128})
    ckpt = eoc.base_checkpoint(profile)
    problems = eval_problems(profile, [6, 7], profile.world.contexts)
    records = evaluate(load_model(ckpt), load_tokenizer(ckpt), problems, profile)
    for op in (6, 7):
        at_op = [r for r in records if r["op"] == op]
        scores = {row["k"]: row["pass@k"] for row in passk_table(at_op, (1, 16, 128), "correct", by="op")}
        print(f"{tokens // 1_000_000}M base, op {op}: {len(at_op)} samples, {sum(r['correct'] for r in at_op)} "
              f"process-correct, {sum(r['answer_correct'] for r in at_op)} with the right answer; "
              f"pass@1 {scores[1]:.4f}, pass@16 {scores[16]:.4f}, pass@128 {scores[128]:.4f}", flush=True)
