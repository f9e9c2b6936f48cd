import torch; torch.set_num_threads(1)
from cascadekit.profiles import load_profile, apply_overrides
from cascadekit.experiments import edge_of_competence as eoc
from cascadekit.experiments.common import eval_problems, load_model
from cascadekit.evaluation.report import evaluate
from cascadekit.tokenizer import load_tokenizer
p = apply_overrides(eoc.chapter_profile(load_profile("toy")), {"evaluation.samples": 4})
tok = load_tokenizer("/tmp/edge_model")
m = load_model("/tmp/edge_model")
probs = eval_problems(p, [3], p.world.contexts)
rec = evaluate(m, tok, probs, p)
shown = 0
from collections import Counter
print(Counter(r["reason"].split(":")[0] for r in rec if not r["correct"]))
for r in rec:
    if r["answer_correct"] and not r["correct"] and shown < 4:
        shown += 1
        print("----", r["reason"]); print(probs[r["problem"]].rl_prompt); print(r["text"]); print("GOLD:", probs[r["problem"]].training_text.split("<solution>")[1][:400])
