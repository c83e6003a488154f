"""Hugging Face transformers as the oracle for ppo.cpp's model (tests/model/test_hf_reference.cpp, [ref]).

    python hf_models.py make KIND OUT_DIR              a small random model of KIND, save_pretrained into OUT_DIR
    python hf_models.py run MODEL_DIR INPUTS OUT [DEVICE]
                                                       transformers' outputs for INPUTS, into OUT (safetensors),
                                                       computed on DEVICE (cpu, the default, or cuda)
    python hf_models.py make-run KIND OUT_DIR INPUTS OUT [DEVICE]
                                                       both, in one process (one start of Python and transformers)

KIND: qwen2 (q/k/v bias, untied head), qwen2-tied, llama (tied), llama-untied; qwen3 (q/k norms, tied, head_dim
twice hidden_size / heads, as Qwen3-0.6B's 128 against 1024 / 16), qwen3-yarn (untied, yarn rotary scaling whose
original context of 16 positions changes the frequencies at the test's lengths), llama3 (Llama 3.2's tied embeddings
and llama3 rotary scaling over an original context of 200 positions: the tiny head's four frequencies fall in all
three bands), mistral (an explicit head_dim, and a sliding window of 8 tokens, shorter than the test's sequences); each with
grouped-query attention, 4 layers and a rope_theta other than the default 10000. qwen3-moe (2 layers: an MoE layer
of 8 experts, top-2 without renormalisation, 32 wide, and a dense one through mlp_only_layers) and mixtral (2 MoE
layers of 8 experts, top-2, renormalised). Every tensor is drawn with std 0.1
(norm weights around 1, biases nonzero) so that the logits are far from uniform and a wrongly loaded tensor shows.

INPUTS (JSON): {"prompts": [[ids]], "responses": [[ids]], "max_new_tokens": N, "eos_id": E (optional)}. OUT holds,
all float32 but the ids:
  logits         [B, P, V]  forward of the left-padded prompts (attention_mask, position_ids = cumsum - 1)
  hidden         [B, P, D]  the backbone's last hidden state (after the final norm), same batch
  greedy         [B, N]     model.generate(do_sample=False) tokens: without eos_id exactly N (the random models' configs
                            have no EOS); with it, a row ends at its EOS and is padded with 0 after it
  greedy_margin  [B, N]     top-1 minus top-2 logit at each greedy step (how far each choice is from a tie)
                            (N = 0: neither is written, and nothing is generated)
  log_probs      [B, R]     log softmax of the logits of prompt + response at each response token, response
                            right-padded (R = longest response)
  aux_loss, z_loss []       MoE models only: the prompts' load-balancing loss (transformers') and router z-loss
  aux_grad, z_grad [E, D]   their gradients with respect to layer 0's router weight
"""
import json
import sys

import torch
from safetensors.torch import save_file
from transformers import (AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                          MixtralConfig, MixtralForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)

KINDS = {
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, dict(tie_word_embeddings=False, rope_theta=1e6, rms_norm_eps=1e-6)),
    "qwen2-tied": (Qwen2Config, Qwen2ForCausalLM, dict(tie_word_embeddings=True, rope_theta=1e6, rms_norm_eps=1e-6)),
    "llama": (LlamaConfig, LlamaForCausalLM, dict(tie_word_embeddings=True, rope_theta=5e5, rms_norm_eps=1e-5)),
    "llama-untied": (LlamaConfig, LlamaForCausalLM, dict(tie_word_embeddings=False, rope_theta=5e5, rms_norm_eps=1e-5)),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM, dict(tie_word_embeddings=True, head_dim=16, rope_theta=1e6,
                                                  rms_norm_eps=1e-6)),
    "qwen3-yarn": (Qwen3Config, Qwen3ForCausalLM, dict(
        tie_word_embeddings=False, head_dim=16, rms_norm_eps=1e-6,
        rope_parameters=dict(rope_type="yarn", rope_theta=1e6, factor=16.0, original_max_position_embeddings=16))),
    "llama3": (LlamaConfig, LlamaForCausalLM, dict(
        tie_word_embeddings=True, rms_norm_eps=1e-5,
        rope_parameters=dict(rope_type="llama3", rope_theta=5e5, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                             original_max_position_embeddings=200))),
    "mistral": (MistralConfig, MistralForCausalLM, dict(tie_word_embeddings=False, head_dim=16, sliding_window=8,
                                                        rope_theta=1e6, rms_norm_eps=1e-5)),
    "qwen3-moe": (Qwen3MoeConfig, Qwen3MoeForCausalLM, dict(
        tie_word_embeddings=False, head_dim=16, rope_theta=1e6, rms_norm_eps=1e-6, num_hidden_layers=2,
        num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=False, mlp_only_layers=[1])),
    "mixtral": (MixtralConfig, MixtralForCausalLM, dict(tie_word_embeddings=False, rope_theta=1e6, rms_norm_eps=1e-5,
                                                        num_hidden_layers=2, num_local_experts=8,
                                                        num_experts_per_tok=2, intermediate_size=32)),
}


def make(kind, out):
    config_class, model_class, extra = KINDS[kind]
    torch.manual_seed(1234 + sorted(KINDS).index(kind))
    shape = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=8,
                 num_key_value_heads=2, max_position_embeddings=256, initializer_range=0.1, bos_token_id=None,
                 eos_token_id=None, pad_token_id=0)
    config = config_class(**{**shape, **extra})
    model = model_class(config).to(torch.float32)
    with torch.no_grad():  # every tensor random, the q/k/v biases and norm weights too (their init is 0 and 1)
        for name, p in model.named_parameters():
            p.copy_((1.0 if name.endswith("norm.weight") else 0.0) + 0.1 * torch.randn_like(p))
    model.save_pretrained(out)


def left_padded(rows, pad):
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, r in enumerate(rows):
        ids[b, width - len(r):] = torch.tensor(r)
        mask[b, width - len(r):] = 1
    return ids, mask


def run(model_dir, inputs_path, out, device="cpu"):
    with open(inputs_path) as f:
        inputs = json.load(f)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager").eval()
    device = torch.device(device)
    if device.type == "cuda":  # float32 GEMMs in float32, not TF32 (PyTorch's default, stated here for the record)
        torch.backends.cuda.matmul.allow_tf32 = False
    model.to(device)
    ids, mask = (t.to(device) for t in left_padded(inputs["prompts"], 0))
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    result = {}
    with torch.no_grad():
        output = model(input_ids=ids, attention_mask=mask, position_ids=positions, output_hidden_states=True)
        result["logits"] = output.logits.float()
        result["hidden"] = output.hidden_states[-1].float()

        n = inputs["max_new_tokens"]
        if n > 0:
            result.update(greedy_generation(model, ids, mask, n, inputs.get("eos_id")))

        # prompt (left-padded) + response (right-padded), as ppo.cpp lays out a rollout batch
        responses = inputs["responses"]
        R = max(len(r) for r in responses)
        resp = torch.zeros((len(responses), R), dtype=torch.long)
        resp_mask = torch.zeros((len(responses), R), dtype=torch.long)
        for b, r in enumerate(responses):
            resp[b, :len(r)] = torch.tensor(r)
            resp_mask[b, :len(r)] = 1
        full_ids, full_mask = torch.cat([ids, resp.to(device)], 1), torch.cat([mask, resp_mask.to(device)], 1)
        full_positions = (full_mask.cumsum(-1) - 1).clamp_min(0)
        logits = model(input_ids=full_ids, attention_mask=full_mask, position_ids=full_positions).logits.float()
        P = ids.shape[1]
        predicting = logits[:, P - 1:P - 1 + R]  # the logits that predict each response token
        result["log_probs"] = torch.log_softmax(predicting, -1).gather(-1, resp.to(device).unsqueeze(-1)).squeeze(-1)
    if getattr(model.config, "num_local_experts", 0):
        result.update(router_losses(model, ids, mask, positions))
    result = {name: t.cpu().contiguous() for name, t in result.items()}
    save_file(result, out)
    if "greedy_margin" in result:
        print(f"hf_models: {model_dir}: min greedy margin {result['greedy_margin'].min().item():.4g}")


def router_losses(model, ids, mask, positions):
    """transformers' load-balancing loss of the prompts (output_router_logits) and the router z-loss (the mean over
    real tokens and MoE layers of logsumexp(router logits)^2, in PyTorch), with their gradients on layer 0's router."""
    with torch.enable_grad():
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, output_router_logits=True)
        gate = model.model.layers[0].mlp.gate.weight
        (aux_grad,) = torch.autograd.grad(out.aux_loss, gate, retain_graph=True)
        real = mask.reshape(-1).float()
        z = sum((torch.logsumexp(logits.float(), -1) ** 2 * real).sum() for logits in out.router_logits)
        z = z / (real.sum() * len(out.router_logits))
        (z_grad,) = torch.autograd.grad(z, gate)
    return {"aux_loss": out.aux_loss.detach().float(), "aux_grad": aux_grad, "z_loss": z.detach(), "z_grad": z_grad}


def greedy_generation(model, ids, mask, n, eos):
    """The greedy tokens of the left-padded prompts (padded with 0 after an EOS) and each step's top-2 margin."""
    until = dict(eos_token_id=eos) if eos is not None else dict(eos_token_id=None, min_new_tokens=n)
    generated = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, do_sample=False,
                               pad_token_id=0, output_scores=True, return_dict_in_generate=True, **until)
    greedy = torch.zeros((ids.shape[0], n), dtype=torch.long, device=ids.device)
    new = generated.sequences[:, ids.shape[1]:]
    greedy[:, :new.shape[1]] = new
    scores = torch.stack(generated.scores, 1)  # [B, N, V], the logits each step chose from
    top2 = scores.topk(2, dim=-1).values
    return {"greedy": greedy, "greedy_margin": (top2[..., 0] - top2[..., 1]).float()}


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "make" and sys.argv[2] in KINDS:
        make(sys.argv[2], sys.argv[3])
    elif len(sys.argv) in (5, 6) and sys.argv[1] == "run":
        run(*sys.argv[2:])
    elif len(sys.argv) in (6, 7) and sys.argv[1] == "make-run" and sys.argv[2] in KINDS:
        make(sys.argv[2], sys.argv[3])
        run(*sys.argv[3:])
    else:
        sys.exit(__doc__)
