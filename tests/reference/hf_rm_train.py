"""A Bradley-Terry reward-model loop in PyTorch on transformers' classifier, the oracle for `ppo rm`
(tests/train/test_rm.cpp, [ref]).

    python hf_rm_train.py MODEL_DIR INPUTS OUT
        INPUTS (JSON): {"train": [[chosen_ids, rejected_ids, margin], ...], "val": [[chosen_ids, rejected_ids], ...],
                        "steps": S, "batch": B, "lr": ..., "eps": ..., "weight_decay": ..., "grad_clip": ..., "center": ...,
                        "exported": DIR or null}
        Loads MODEL_DIR with AutoModelForSequenceClassification (float32) and takes S AdamW steps, step k on the B
        pairs starting at (k * B) mod len(train), in order: loss = mean(-logsigmoid(r_c - r_r - margin)) +
        center * mean((r_c + r_r)^2), gradients clipped to grad_clip. OUT (JSON): {"losses": [...], "accuracies":
        [...], "val": [[r_c, r_r], ...]} after training, and "exported": the val scores of the folder "exported"
        (loaded the same way) when given.
Rows are right-padded with the config's pad_token_id and an attention mask, as tokenizer(..., padding=True) pads.
"""
import json
import sys

import torch
from transformers import AutoModelForSequenceClassification


def scores(model, rows):
    pad = model.config.pad_token_id
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, r in enumerate(rows):
        ids[b, :len(r)] = torch.tensor(r)
        mask[b, :len(r)] = 1
    return model(input_ids=ids, attention_mask=mask).logits[:, 0]


def val_scores(model, pairs):
    with torch.no_grad():
        s = scores(model, [row for pair in pairs for row in pair[:2]]).view(-1, 2)
    return s.tolist()


def main(model_dir, inputs_path, out_path):
    torch.manual_seed(0)
    spec = json.load(open(inputs_path))
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, dtype=torch.float32)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec["lr"], betas=(0.9, 0.999), eps=spec["eps"],
                                  weight_decay=spec["weight_decay"])
    train, batch = spec["train"], spec["batch"]
    losses, accuracies = [], []
    for step in range(spec["steps"]):
        start = (step * batch) % len(train)
        pairs = train[start:start + batch]
        s = scores(model, [row for pair in pairs for row in pair[:2]]).view(-1, 2)
        margin = torch.tensor([pair[2] for pair in pairs], dtype=torch.float32)
        chosen, rejected = s[:, 0], s[:, 1]
        loss = -torch.nn.functional.logsigmoid(chosen - rejected - margin).mean()
        loss = loss + spec["center"] * ((chosen + rejected) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), spec["grad_clip"])
        optimizer.step()
        losses.append(loss.item())
        accuracies.append((chosen > rejected).float().mean().item())
    model.eval()
    result = {"losses": losses, "accuracies": accuracies, "val": val_scores(model, spec["val"])}
    if spec.get("exported"):
        exported = AutoModelForSequenceClassification.from_pretrained(spec["exported"], dtype=torch.float32).eval()
        result["exported"] = val_scores(exported, spec["val"])
    json.dump(result, open(out_path, "w"))


if __name__ == "__main__":
    main(*sys.argv[1:4])
