"""Hugging Face transformers as the oracle for ppo.cpp's reward models (tests/model/test_reward_model.cpp, [ref]).

    python hf_reward.py make KIND OUT_DIR [VOCAB [TOKENIZER_DIR]]
        a small random *ForSequenceClassification of KIND (num_labels 1, pad_token_id 0), save_pretrained into OUT_DIR,
        with VOCAB tokens (default 256) and TOKENIZER_DIR's tokenizer files copied beside it
    python hf_reward.py run MODEL_DIR INPUTS OUT
        INPUTS (JSON) {"rows": [[ids]]}: OUT (JSON) {"right": [...], "left": [...]}, the scores of the rows batched
        with right padding (as tokenizer(..., padding=True) pads) and with left padding, pad_token_id as the filler
    python hf_reward.py chat MODEL_DIR < pairs.jsonl
        each line {"messages": [...], "response": "..."}: one line {"ids": [...], "score": s}, the conversation with
        the response as the assistant's turn, apply_chat_template(tokenize=True), then the model

KIND: qwen2, llama, qwen3 (q/k norms, head_dim twice hidden / heads), mistral (head_dim 16, a sliding window of 8).
Every tensor is drawn with std 0.1 (norm weights around 1), the score head too, so a wrongly read token shows.
"""
import json
import os
import shutil
import sys

import torch
from transformers import (AutoModelForSequenceClassification, AutoTokenizer, LlamaConfig,
                          LlamaForSequenceClassification, MistralConfig, MistralForSequenceClassification, Qwen2Config,
                          Qwen2ForSequenceClassification, Qwen3Config, Qwen3ForSequenceClassification)

KINDS = {
    "qwen2": (Qwen2Config, Qwen2ForSequenceClassification, dict(rope_theta=1e6, rms_norm_eps=1e-6)),
    "llama": (LlamaConfig, LlamaForSequenceClassification, dict(rope_theta=5e5, rms_norm_eps=1e-5)),
    "qwen3": (Qwen3Config, Qwen3ForSequenceClassification, dict(head_dim=16, rope_theta=1e6, rms_norm_eps=1e-6)),
    "mistral": (MistralConfig, MistralForSequenceClassification, dict(head_dim=16, sliding_window=8, rope_theta=1e6,
                                                                      rms_norm_eps=1e-5)),
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json")


def make(kind, out, vocab=256, tokenizer_dir=None):
    config_class, model_class, extra = KINDS[kind]
    torch.manual_seed(4321 + sorted(KINDS).index(kind))
    config = config_class(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                          num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=256,
                          initializer_range=0.1, bos_token_id=None, eos_token_id=None, pad_token_id=0, num_labels=1,
                          **extra)
    model = model_class(config).to(torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_((1.0 if name.endswith("norm.weight") else 0.0) + 0.1 * torch.randn_like(p))
    model.save_pretrained(out)
    if tokenizer_dir:
        for name in TOKENIZER_FILES:
            if os.path.exists(os.path.join(tokenizer_dir, name)):
                shutil.copyfile(os.path.join(tokenizer_dir, name), os.path.join(out, name))


def batch(rows, pad, left):
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, r in enumerate(rows):
        span = slice(width - len(r), width) if left else slice(0, len(r))
        ids[b, span] = torch.tensor(r)
        mask[b, span] = 1
    return ids, mask


def run(model_dir, inputs_path, out):
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, dtype=torch.float32).eval()
    rows = json.load(open(inputs_path))["rows"]
    pad = model.config.pad_token_id
    result = {}
    with torch.no_grad():
        for side, left in (("right", False), ("left", True)):
            ids, mask = batch(rows, pad, left)
            result[side] = model(input_ids=ids, attention_mask=mask).logits[:, 0].tolist()
    json.dump(result, open(out, "w"))


def chat(model_dir):
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    for line in sys.stdin:
        if not line.strip():
            continue
        item = json.loads(line)
        conversation = item["messages"] + [{"role": "assistant", "content": item["response"]}]
        ids = tokenizer.apply_chat_template(conversation, tokenize=True)
        if not isinstance(ids, list):  # a BatchEncoding where return_dict is the default
            ids = ids["input_ids"]
        with torch.no_grad():
            score = model(input_ids=torch.tensor([ids])).logits[0, 0].item()
        sys.stdout.write(json.dumps({"ids": ids, "score": score}) + "\n")


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "make":
        make(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 256,
             sys.argv[5] if len(sys.argv) > 5 else None)
    elif command == "run":
        run(*sys.argv[2:5])
    elif command == "chat":
        chat(sys.argv[2])
    else:
        sys.exit(f"unknown command {command}")
