#!/usr/bin/env python3
"""Eager PyTorch peer of ppo.cpp for bench/peers.sh: the same decoder, generation loop and PPO step, written as a
skilled PyTorch user would write them (no torch.compile: eager mode), so that the comparison says what the C++ buys.

The decoder is ppo.cpp's (model/transformer.cpp, its attention model/attention.cpp), which is Hugging Face LLaMA's:
token embedding, RMSNorm in float32, rotary embedding with rotate_half, grouped-query attention, SwiGLU MLP, tied LM
head; the critic is the backbone + Linear(D, 1). Generation (rollout/rollout.cpp, decode/continuous_decoder.cpp):
left-padded prompts, position ids from the mask, a KV cache preallocated for prompt + new tokens and written in place,
rotary tables computed once, q/k/v and gate/up weights concatenated once per generation (one GEMM each per layer, as
ppo.cpp), an additive mask with one column opened per step, sampling by inverse CDF over the softmax probabilities with
one uniform per row and token, torch.inference_mode. The PPO step (train/trainer.cpp, workers/, rl/) is that of
configs/bench_memory.yaml with the defaults of configs/ppo_trainer.yaml (see cmd_ppo_step in eager_ppo.py).

Attention (--attn, default auto): prefill and training forwards use scaled_dot_product_attention where torch has it
(>= 2.1; GQA through enable_gqa from 2.5, else repeated kv heads), else Hugging Face's eager matmul + softmax (the
query heads of a kv group stacked, so k/v are not copied). A decode step (one query per row) uses the formulation
measured fastest for the torch version on this CPU (AUTO_DECODE in eager_model.py; `selfcheck` checks every one of
them); --attn sdpa|matmul|bcast forces one everywhere it applies.

The code: eager_model.py holds the decoder, the generation loop and the `generate` command; eager_ppo.py the PPO step
and the `ppo-step` and `phases` commands; this file the self-check against transformers (hf_twin, cmd_selfcheck), the
arguments and main (hf_generate.py shares decode_args, parse and hf_twin).

  eager_port.py generate --model tiny|8layer --threads N --batch B --prompt-len P --new-tokens R --repeats K
  eager_port.py ppo-step [--model 8layer|tiny] --threads N --steps S
  eager_port.py phases --batch FILE.json [--model 8layer|tiny] --threads N [--repeats K]
                             (ppo-step's training phases, old log-probs to the actor update, on a batch from a file;
                              the median of K rounds after a warm-up round)
  eager_port.py selfcheck    (decode == full forward for every attention kind; with transformers installed, logits
                              and decode log-probs == LlamaForCausalLM's on the same weights, within 1e-4)

Each prints one JSON line.
"""
import argparse
import json
import sys

import torch

from eager_model import ATTN, BOS, EOS, EPS, HAS_SDPA, PAD, SHAPES, THETA, VOCAB, Model, bench_prompts, \
    causal_bias, cmd_generate, generate, positions_of, set_attention
from eager_ppo import cmd_phases, cmd_ppo_step, response_log_probs


# ------------------------------------------------------------------------------------------------ selfcheck

def hf_twin(model):
    """transformers' LlamaForCausalLM with the weights of `model` (None without transformers)."""
    try:
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError:
        return None
    s = model.s
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=s["hidden"], intermediate_size=s["inter"],
                      num_hidden_layers=s["layers"], num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"],
                      rms_norm_eps=EPS, rope_theta=THETA, tie_word_embeddings=True, max_position_embeddings=512,
                      attention_bias=False, pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS)
    hf = LlamaForCausalLM(cfg).eval()
    sd = {"model.embed_tokens.weight": model.embed.weight, "model.norm.weight": model.norm.weight}
    for i, layer in enumerate(model.layers):
        p = f"model.layers.{i}."
        sd.update({p + "self_attn.q_proj.weight": layer.q.weight, p + "self_attn.k_proj.weight": layer.k.weight,
                   p + "self_attn.v_proj.weight": layer.v.weight, p + "self_attn.o_proj.weight": layer.o.weight,
                   p + "mlp.gate_proj.weight": layer.gate.weight, p + "mlp.up_proj.weight": layer.up.weight,
                   p + "mlp.down_proj.weight": layer.down.weight, p + "input_layernorm.weight": layer.ln1.weight,
                   p + "post_attention_layernorm.weight": layer.ln2.weight})
    missing, unexpected = hf.load_state_dict({k: v.detach().clone() for k, v in sd.items()}, strict=False)
    assert not unexpected and all(k == "lm_head.weight" for k in missing), (missing, unexpected)
    hf.tie_weights()
    assert torch.equal(hf.lm_head.weight, model.embed.weight)
    return hf


def cmd_selfcheck(a):
    """For both shapes, on left-padded prompts: (1) the KV-cache decode (every attention kind) gives the log-probs
    of a full forward over prompt + generated tokens; (2) with transformers: our logits == LlamaForCausalLM's, and
    the decoded log-probs == its log-probs of the same tokens. Maximum absolute differences; fails above 1e-4."""
    kinds = ["matmul", "bcast"] + (["sdpa"] if HAS_SDPA else [])
    report, worst = {}, 0.0
    for name in SHAPES:
        model = Model(SHAPES[name]).eval()
        hf = hf_twin(model)
        ids, mask = bench_prompts(4, 12)
        mask[0, :3] = 0  # left padding
        mask[2, :1] = 0
        ids = ids * mask
        positions = positions_of(mask)
        r = 10
        uniforms = torch.rand(4, r, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
        with torch.inference_mode():
            for train_kind in ["matmul"] + (["sdpa"] if HAS_SDPA else []):
                ATTN["train"] = train_kind
                ours = model.logits(model.hidden(ids, positions, causal_bias(mask, 12)))
                if hf is not None:
                    theirs = hf(input_ids=ids, attention_mask=mask, position_ids=positions).logits
                    report[f"{name}/logits[{train_kind}] vs transformers"] = \
                        float(((ours - theirs).abs() * mask[..., None]).max())
            for kind in kinds:
                set_attention(kind)
                tokens, lps, _ = generate(model, ids, mask, r, uniforms)
                full, full_mask = torch.cat((ids, tokens), 1), torch.cat((mask, torch.ones_like(tokens)), 1)
                full_pos = positions_of(full_mask)
                ATTN["train"] = "matmul"
                again = response_log_probs(model, full, full_mask, full_pos, r)[0]
                report[f"{name}/decode[{kind}] vs full forward"] = float((lps - again).abs().max())
                if hf is not None:
                    logits = hf(input_ids=full, attention_mask=full_mask, position_ids=full_pos).logits.float()
                    hf_lps = torch.log_softmax(logits[:, 11:-1], -1).gather(-1, tokens[..., None]).squeeze(-1)
                    report[f"{name}/decode[{kind}] vs transformers"] = float((lps - hf_lps).abs().max())
            set_attention(a.attn)
    worst = max(report.values())
    print(json.dumps(dict(selfcheck="eager port", torch=torch.__version__,
                          transformers=hf is not None, max_abs_diff=report, ok=worst < 1e-4)))
    sys.exit(0 if worst < 1e-4 else 1)


# ------------------------------------------------------------------------------------------------ arguments

def decode_args(ap, model_default="tiny", batch_type=int, repeats_default=3):
    """The decoding benchmark's arguments (hf_generate.py shares them)."""
    ap.add_argument("--model", choices=list(SHAPES), default=model_default,
                    help="tiny (ModelConfig defaults) or 8layer (configs/bench_memory.yaml's model)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=batch_type, default=64)
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=repeats_default)
    return ap


def parse(ap):
    """Parses, then sets torch's threads (intra-op N, inter-op 1)."""
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    return a


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=["generate", "ppo-step", "phases", "selfcheck"])
    decode_args(ap, model_default=None, batch_type=str, repeats_default=None)  # generate: rows; phases: a file
    ap.add_argument("--steps", type=int, default=4, help="ppo-step: steps to run (the median of 2..S is reported)")
    ap.add_argument("--attn", choices=["auto", "sdpa", "matmul", "bcast"], default="auto")
    a = parse(ap)
    if a.model is None:  # ppo-step and phases: configs/bench_memory.yaml's model
        a.model = "8layer" if a.command in ("ppo-step", "phases") else "tiny"
    if a.repeats is None:
        a.repeats = 5 if a.command == "phases" else 3
    if a.command == "phases":
        if not isinstance(a.batch, str):
            ap.error("phases needs --batch FILE.json")
    else:
        try:
            a.batch = int(a.batch)
        except ValueError:
            ap.error(f"--batch: {a.command} takes a row count, not {a.batch!r}")
    set_attention(a.attn)
    {"generate": cmd_generate, "ppo-step": cmd_ppo_step, "phases": cmd_phases, "selfcheck": cmd_selfcheck}[a.command](a)


if __name__ == "__main__":
    main()
