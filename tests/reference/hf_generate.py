"""Greedy generations of a Hugging Face folder in transformers, compared with ppo.cpp's (`ppo generate --jsonl`).

    build/ppo generate --config C model.path=DIR rollout.n=1 rollout.temperature=0 --count K --jsonl > ppo.jsonl
    .venv-ref/bin/python tests/reference/hf_generate.py DIR MAX_NEW_TOKENS < ppo.jsonl

Each line's prompt is tokenized without special tokens (ppo.cpp adds none to chat-rendered prompts) and continued
greedily for at most MAX_NEW_TOKENS tokens or until EOS; the decoded text must equal ppo.cpp's response. Prints one
line per prompt and exits 1 on any difference.
"""
import json
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

folder, max_new = sys.argv[1], int(sys.argv[2])
tokenizer = AutoTokenizer.from_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
rows = [json.loads(line) for line in sys.stdin if line.strip()]
same = 0
for i, row in enumerate(rows):
    ids = tokenizer(row["prompt"], add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new,
                             do_sample=False, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.eos_token_id)
    text = tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    ok = text == row["response"]
    same += ok
    print(f"prompt {i}: {'same' if ok else 'DIFFERENT'} ({ids.shape[1]} prompt tokens): {text[:100]!r}")
    if not ok:
        print(f"  ppo.cpp: {row['response'][:200]!r}\n  transformers: {text[:200]!r}")
print(f"hf_generate: {same} of {len(rows)} greedy responses identical")
sys.exit(0 if same == len(rows) else 1)
