#!/usr/bin/env python3
"""Eager PyTorch peer of ppo.cpp for bench/peers.sh: the same decoder (LLaMA / Qwen2 family: RMSNorm in float32,
rotary embedding with rotate_half, grouped-query attention, SwiGLU, tied LM head, a value head for the critic), the
same generation loop and the same PPO step, written as a PyTorch user would write them without handicaps: KV cache
preallocated for prompt + new tokens and written in place, rotary tables computed once, an additive mask,
scaled_dot_product_attention where torch has it (>= 2.1), inference_mode, fused AdamW (foreach) and clip_grad_norm_.

  eager_port.py generate --model tiny|8layer --threads N --batch B --prompt-len P --new-tokens R --repeats K
  eager_port.py ppo-step --threads N --steps S
  eager_port.py selfcheck            (the reference environment: logits equal transformers' LlamaForCausalLM)

Each prints one JSON line.
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

SHAPES = {  # ppo.cpp's ModelConfig defaults, and the model of configs/bench_memory.yaml
    "tiny": dict(hidden=64, layers=2, heads=4, kv_heads=2, inter=128),
    "8layer": dict(hidden=256, layers=8, heads=8, kv_heads=4, inter=688),
}
VOCAB, THETA, EPS = 99, 10000.0, 1e-6
CLIP_FOREACH = "foreach" in torch.nn.utils.clip_grad_norm_.__code__.co_varnames  # torch >= 2.0
HAS_SDPA = hasattr(F, "scaled_dot_product_attention") and tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 1)


class RMSNorm(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x32 = x.float()
        return self.weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Layer(torch.nn.Module):
    def __init__(self, s):
        super().__init__()
        d, h, kv = s["hidden"], s["heads"], s["kv_heads"]
        self.h, self.kv, self.dh = h, kv, d // h
        self.q = torch.nn.Linear(d, h * self.dh, bias=False)
        self.k = torch.nn.Linear(d, kv * self.dh, bias=False)
        self.v = torch.nn.Linear(d, kv * self.dh, bias=False)
        self.o = torch.nn.Linear(h * self.dh, d, bias=False)
        self.gate = torch.nn.Linear(d, s["inter"], bias=False)
        self.up = torch.nn.Linear(d, s["inter"], bias=False)
        self.down = torch.nn.Linear(s["inter"], d, bias=False)
        self.ln1, self.ln2 = RMSNorm(d), RMSNorm(d)

    def attention(self, x, cos, sin, bias, cache, start):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, self.h, self.dh).transpose(1, 2)
        k = self.k(x).view(b, t, self.kv, self.dh).transpose(1, 2)
        v = self.v(x).view(b, t, self.kv, self.dh).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if cache is not None:  # preallocated [b, kv, capacity, dh], written in place
            cache[0][:, :, start:start + t] = k
            cache[1][:, :, start:start + t] = v
            k, v = cache[0][:, :, :start + t], cache[1][:, :, :start + t]
        rep = self.h // self.kv
        if HAS_SDPA:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        else:  # grouped query heads stacked along the query axis (no k/v copies), as Hugging Face's eager path
            gq = q.reshape(b, self.kv, rep * t, self.dh)
            scores = torch.matmul(gq, k.transpose(-2, -1)).view(b, self.h, t, -1) / math.sqrt(self.dh) + bias
            w = torch.softmax(scores.float(), -1).to(v.dtype).view(b, self.kv, rep * t, -1)
            out = torch.matmul(w, v).view(b, self.h, t, self.dh)
        return self.o(out.transpose(1, 2).reshape(b, t, -1))

    def forward(self, x, cos, sin, bias, cache=None, start=0):
        h = x + self.attention(self.ln1(x), cos, sin, bias, cache, start)
        y = self.ln2(h)
        return h + self.down(F.silu(self.gate(y)) * self.up(y))


class Model(torch.nn.Module):
    def __init__(self, s, value_head=False, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.s = s
        self.embed = torch.nn.Embedding(VOCAB, s["hidden"])
        self.layers = torch.nn.ModuleList(Layer(s) for _ in range(s["layers"]))
        self.norm = RMSNorm(s["hidden"])
        self.value = torch.nn.Linear(s["hidden"], 1) if value_head else None
        for name, p in self.named_parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith("bias"):
                torch.nn.init.zeros_(p)
        dh = s["hidden"] // s["heads"]
        inv_freq = 1.0 / THETA ** (torch.arange(0, dh, 2).float() / dh)
        freqs = torch.arange(512).float()[:, None] * inv_freq
        angles = torch.cat((freqs, freqs), -1)
        self.cos_table, self.sin_table = angles.cos(), angles.sin()  # [positions, dh], computed once

    def hidden(self, ids, positions, bias, caches=None, start=0):
        cos = self.cos_table[positions].unsqueeze(1)  # [b, 1, t, dh]
        sin = self.sin_table[positions].unsqueeze(1)
        x = self.embed(ids)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, bias, None if caches is None else caches[i], start)
        return self.norm(x)

    def logits(self, hidden):
        return F.linear(hidden, self.embed.weight)


def causal_bias(mask, t):
    """Additive [b, 1, t, total] mask: 0 where the key is real and not in the query's future, else float32's lowest."""
    total = mask.shape[1]
    q_pos = torch.arange(total - t, total)[:, None]
    allowed = (torch.arange(total)[None, :] <= q_pos)[None, None] & mask.bool()[:, None, None, :]
    return torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)


def generate(model, ids, mask, new_tokens, uniforms, eos_id=-1):
    """Left-padded prompts [b, p]; samples at temperature 1 by inverse CDF; returns tokens [b, r], log-probs, mask."""
    b, p = ids.shape
    s = model.s
    dh = s["hidden"] // s["heads"]
    capacity = p + new_tokens
    caches = [(torch.empty(b, s["kv_heads"], capacity, dh), torch.empty(b, s["kv_heads"], capacity, dh))
              for _ in range(s["layers"])]
    full_mask = torch.zeros(b, capacity, dtype=torch.long)
    full_mask[:, :p] = mask
    key_bias = torch.zeros(b, capacity).masked_fill(full_mask == 0, torch.finfo(torch.float32).min)
    positions = (mask.cumsum(1) - 1).clamp_min(0)
    hidden = model.hidden(ids, positions, causal_bias(mask, p), caches, 0)
    next_pos = positions[:, -1:] + 1
    tokens = torch.empty(b, new_tokens, dtype=torch.long)
    log_probs = torch.empty(b, new_tokens)
    running = torch.ones(b, dtype=torch.bool)
    for t in range(new_tokens):
        logp = torch.log_softmax(model.logits(hidden[:, -1]).float(), -1)
        cdf = logp.exp().double().cumsum(-1)
        tok = (cdf <= uniforms[:, t:t + 1] * cdf[:, -1:]).sum(-1).clamp_max(VOCAB - 1)
        tokens[:, t] = tok
        log_probs[:, t] = logp.gather(-1, tok[:, None]).squeeze(-1)
        if eos_id >= 0:
            running &= tok != eos_id
            if t % 8 == 7 and not running.any():
                break
        if t + 1 == new_tokens:
            break
        key_bias[:, p + t] = 0.0
        hidden = model.hidden(tok[:, None], next_pos, key_bias[:, None, None, :p + t + 1], caches, p + t)
        next_pos = next_pos + 1
    is_eos = (tokens == eos_id).long()
    response_mask = ((is_eos.cumsum(1) - is_eos) == 0).float()
    return tokens, log_probs * response_mask, response_mask


def prompts(batch, length):
    ids = torch.tensor([[1] + [4 + (i * 7 + j * 3) % 90 for j in range(1, length)] for i in range(batch)])
    return ids, torch.ones_like(ids)


def cmd_generate(a):
    model = Model(SHAPES[a.model]).eval()
    ids, mask = prompts(a.batch, a.prompt_len)
    uniforms = torch.rand(a.batch, a.new_tokens, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    best = float("inf")
    with torch.inference_mode():
        for r in range(a.repeats + 1):  # the first run is the warm-up
            start = time.perf_counter()
            generate(model, ids, mask, a.new_tokens, uniforms)
            if r > 0:
                best = min(best, time.perf_counter() - start)
    n = a.batch * a.new_tokens
    print(json.dumps(dict(impl="eager", torch=torch.__version__, model=a.model, threads=a.threads, batch=a.batch,
                          prompt_len=a.prompt_len, new_tokens=a.new_tokens, seconds=round(best, 6),
                          tokens_per_s=round(n / best, 1), params=sum(p.numel() for p in model.parameters()))))


def sequence_log_probs(model, ids, mask, positions, r):
    """Log-probs and values helpers: one forward, the last r positions' predictions."""
    t = ids.shape[1]
    hidden = model.hidden(ids, positions, causal_bias(mask, t))
    return hidden[:, t - r - 1:t - 1]


def token_log_probs(model, ids, mask, positions, r):
    logits = model.logits(sequence_log_probs(model, ids, mask, positions, r)).float()
    return torch.log_softmax(logits, -1).gather(-1, ids[:, -r:, None]).squeeze(-1)


def values_of(critic, ids, mask, positions, r):
    return critic.value(sequence_log_probs(critic, ids, mask, positions, r)).squeeze(-1).float()


def clip(model):
    kwargs = {"foreach": True} if CLIP_FOREACH else {}
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, **kwargs)


def in_micro_batches(fn, size, *tensors):
    return torch.cat([fn(*(x[i:i + size] for x in tensors)) for i in range(0, tensors[0].shape[0], size)])


def cmd_ppo_step(a):
    """configs/bench_memory.yaml: 16 prompts x 4 = 64 rows, reverse prompts of 12-16 digits, responses <= 24 tokens,
    GAE (gamma = lam = 1) with a critic, one mini-batch, micro-batches of 32 (updates) and 16 (log-probs), KL loss
    (low_var_kl, 0.001), clip 0.2, value clip 0.5, AdamW lr 1e-4, grad clip 1.0."""
    s = SHAPES["8layer"]
    actor, ref, critic = Model(s, seed=0), Model(s, seed=0), Model(s, value_head=True, seed=1)
    ref.eval()
    opt_a = torch.optim.AdamW(actor.parameters(), lr=1e-4, weight_decay=0.0, foreach=True)
    opt_c = torch.optim.AdamW(critic.parameters(), lr=1e-4, weight_decay=0.0, foreach=True)
    gen = torch.Generator().manual_seed(0)
    eos, P, R = 2, 24, 24
    steps, tokens, response_tokens = [], [], []
    phases = {k: [] for k in ("generate", "old_log_prob", "ref", "values", "update_actor", "update_critic")}
    for step in range(a.steps):
        t0 = time.perf_counter()
        rows = []
        for _ in range(16):
            digits = torch.randint(0, 10, (int(torch.randint(12, 17, (1,), generator=gen)),), generator=gen)
            rows += [[1] + (digits + 4).tolist() + [62]] * 4  # BOS, the digits' ids, '>'
        ids = torch.zeros(64, P, dtype=torch.long)
        mask = torch.zeros(64, P, dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, P - len(row):] = torch.tensor(row)
            mask[i, P - len(row):] = 1
        with torch.no_grad():
            actor.eval()
            resp, _, resp_mask = generate(actor, ids, mask, R, torch.rand(64, R, dtype=torch.float64, generator=gen),
                                          eos_id=eos)
        t1 = time.perf_counter()
        full = torch.cat([ids, resp], 1)
        full_mask = torch.cat([mask, resp_mask.long()], 1)
        positions = (full_mask.cumsum(1) - 1).clamp_min(0)
        with torch.no_grad():
            old = in_micro_batches(lambda *x: token_log_probs(actor, *x, R), 16, full, full_mask, positions)
            t2 = time.perf_counter()
            ref_lp = in_micro_batches(lambda *x: token_log_probs(ref, *x, R), 16, full, full_mask, positions)
            t3 = time.perf_counter()
            values = in_micro_batches(lambda *x: values_of(critic, *x, R), 16, full, full_mask, positions)
            t4 = time.perf_counter()
        # Reward at the last response token; GAE with gamma = lam = 1; whitened advantages.
        last = (resp_mask.sum(1) - 1).clamp_min(0).long()
        rewards = torch.zeros(64, R)
        rewards[torch.arange(64), last] = (resp == 5).float().mean(1)
        adv = torch.zeros(64, R)
        next_value = torch.zeros(64)
        running = torch.zeros(64)
        for t in reversed(range(R)):
            delta = rewards[:, t] + next_value - values[:, t]
            running = (delta + running) * resp_mask[:, t]
            adv[:, t] = running
            next_value = values[:, t] * resp_mask[:, t]
        returns = adv + values
        mean = (adv * resp_mask).sum() / resp_mask.sum()
        var = (((adv - mean) ** 2) * resp_mask).sum() / resp_mask.sum()
        adv = (adv - mean) * torch.rsqrt(var + 1e-8) * resp_mask
        n_tokens = resp_mask.sum()
        actor.train()
        opt_a.zero_grad(set_to_none=True)
        for i in range(0, 64, 32):
            sl = slice(i, i + 32)
            lp = token_log_probs(actor, full[sl], full_mask[sl], positions[sl], R)
            ratio = torch.exp(lp - old[sl])
            pg = torch.maximum(-adv[sl] * ratio, -adv[sl] * ratio.clamp(0.8, 1.2))
            kl = ref_lp[sl] - lp
            low_var_kl = (torch.exp(kl) - kl - 1).clamp(-10, 10)
            loss = ((pg + 0.001 * low_var_kl) * resp_mask[sl]).sum() / n_tokens
            loss.backward()
        clip(actor)
        opt_a.step()
        t5 = time.perf_counter()
        critic.train()
        opt_c.zero_grad(set_to_none=True)
        for i in range(0, 64, 32):
            sl = slice(i, i + 32)
            v = values_of(critic, full[sl], full_mask[sl], positions[sl], R)
            clipped = values[sl] + (v - values[sl]).clamp(-0.5, 0.5)
            vf = 0.5 * torch.maximum((v - returns[sl]) ** 2, (clipped - returns[sl]) ** 2)
            ((vf * resp_mask[sl]).sum() / n_tokens).backward()
        clip(critic)
        opt_c.step()
        t6 = time.perf_counter()
        for k, dt in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5)):
            phases[k].append(dt)
        steps.append(t6 - t0)
        tokens.append(float(full_mask.sum()))
        response_tokens.append(float(resp_mask.sum()))
    tail = slice(1, None) if a.steps > 1 else slice(0, None)
    print(json.dumps(dict(impl="eager", torch=torch.__version__, threads=a.threads,
                          step_s=round(statistics.median(steps[tail]), 4),
                          tokens_per_step=round(statistics.mean(tokens[tail]), 1),
                          response_tokens_per_step=round(statistics.mean(response_tokens[tail]), 1),
                          phases={k: round(statistics.median(v[tail]), 4) for k, v in phases.items()})))


def cmd_selfcheck(_):
    """The port's logits equal transformers' LlamaForCausalLM with the same weights (tiny shape)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    s = SHAPES["tiny"]
    model = Model(s).eval()
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=s["hidden"], intermediate_size=s["inter"],
                      num_hidden_layers=s["layers"], num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"],
                      rms_norm_eps=EPS, rope_theta=THETA, tie_word_embeddings=True, max_position_embeddings=512,
                      attention_bias=False)
    hf = LlamaForCausalLM(cfg).eval()
    sd = {"model.embed_tokens.weight": model.embed.weight, "model.norm.weight": model.norm.weight,
          "lm_head.weight": model.embed.weight}
    for i, layer in enumerate(model.layers):
        p = f"model.layers.{i}."
        sd.update({p + "self_attn.q_proj.weight": layer.q.weight, p + "self_attn.k_proj.weight": layer.k.weight,
                   p + "self_attn.v_proj.weight": layer.v.weight, p + "self_attn.o_proj.weight": layer.o.weight,
                   p + "mlp.gate_proj.weight": layer.gate.weight, p + "mlp.up_proj.weight": layer.up.weight,
                   p + "mlp.down_proj.weight": layer.down.weight, p + "input_layernorm.weight": layer.ln1.weight,
                   p + "post_attention_layernorm.weight": layer.ln2.weight})
    hf.load_state_dict({k: v.detach().clone() for k, v in sd.items()}, strict=False)
    ids, mask = prompts(4, 12)
    mask[0, :3] = 0  # some left padding
    positions = (mask.cumsum(1) - 1).clamp_min(0)
    with torch.inference_mode():
        ours = model.logits(model.hidden(ids, positions, causal_bias(mask, 12)))
        theirs = hf(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    diff = float(((ours - theirs).abs() * mask[..., None]).max())
    print(json.dumps(dict(selfcheck="logits vs transformers LlamaForCausalLM", max_abs_diff=diff)))
    sys.exit(0 if diff < 1e-4 else 1)


def decode_args(ap):
    """The decoding benchmark's arguments (hf_generate.py shares them); sets torch's threads once parsed."""
    ap.add_argument("--model", choices=list(SHAPES), default="tiny")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    return ap


def parse(ap):
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    return a


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("command", choices=["generate", "ppo-step", "selfcheck"])
    decode_args(ap).add_argument("--steps", type=int, default=4)
    a = parse(ap)
    {"generate": cmd_generate, "ppo-step": cmd_ppo_step, "selfcheck": cmd_selfcheck}[a.command](a)


if __name__ == "__main__":
    main()
