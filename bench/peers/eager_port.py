#!/usr/bin/env python3
"""Eager PyTorch peer of ppo.cpp for bench/peers.sh: the same decoder, generation loop and PPO step, written as a
skilled PyTorch user would write them (no torch.compile: eager mode), so that the comparison says what the C++ buys.

The decoder is ppo.cpp's (model/transformer.cpp, its attention model/attention.cpp), which is Hugging Face LLaMA's:
token embedding, RMSNorm in float32, rotary embedding with rotate_half, grouped-query attention, SwiGLU MLP, tied LM
head; the critic is the backbone + Linear(D, 1). Generation (rollout/rollout.cpp, rollout/continuous_decoder.cpp):
left-padded prompts, position ids from the mask, a KV cache preallocated for prompt + new tokens and written in place,
rotary tables computed once, q/k/v and gate/up weights concatenated once per generation (one GEMM each per layer, as
ppo.cpp), an additive mask with one column opened per step, sampling by inverse CDF over the softmax probabilities with
one uniform per row and token, torch.inference_mode. The PPO step (train/trainer.cpp, workers/, rl/) is that of
configs/bench_memory.yaml with the defaults of configs/ppo_trainer.yaml (see cmd_ppo_step).

Attention (--attn, default auto): prefill and training forwards use scaled_dot_product_attention where torch has it
(>= 2.1; GQA through enable_gqa from 2.5, else repeated kv heads), else Hugging Face's eager matmul + softmax (the
query heads of a kv group stacked, so k/v are not copied). A decode step (one query per row) uses the formulation
measured fastest for the torch version on this CPU (AUTO_DECODE below; `selfcheck` checks every one of them);
--attn sdpa|matmul|bcast forces one everywhere it applies.

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
VOCAB, THETA, EPS, INIT_STD = 99, 10000.0, 1e-6, 0.02  # the char tokenizer's vocabulary; ModelConfig defaults
PAD, BOS, EOS = 0, 1, 2  # CharTokenizer (model/tokenizer.h): printable character c has id 4 + ord(c) - 32
LOWEST = torch.finfo(torch.float32).min  # masked keys: float32's lowest, as ppo.cpp (a fully masked row is uniform)
VERSION = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
HAS_SDPA = VERSION >= (2, 1) and hasattr(F, "scaled_dot_product_attention")
SDPA_GQA = VERSION >= (2, 5)  # enable_gqa
HAS_RMS_NORM = hasattr(F, "rms_norm")  # torch >= 2.4; the same float32 arithmetic, fewer dispatches
FUSED_ADAMW = VERSION >= (2, 4)  # AdamW(fused=True) on the CPU; before, the default for-loop (foreach is slower on CPU)
CLIP_FOREACH = "foreach" in torch.nn.utils.clip_grad_norm_.__code__.co_varnames  # torch >= 2.0
# Decode-step attention by torch version, measured on the 2-core AMD EPYC (tiny and 8-layer models, 1 and 2 threads):
# 1.13's CPU bmm runs one small GEMM per (sequence, kv head) matrix, so a broadcast multiply + sum is faster there;
# on 2.x the grouped matmul beats sdpa for a single query.
AUTO_DECODE = "bcast" if VERSION < (2, 0) else "matmul"
ATTN = {"train": "sdpa" if HAS_SDPA else "matmul", "decode": AUTO_DECODE}  # set by --attn


def set_attention(kind):
    if kind == "auto":
        ATTN.update(train="sdpa" if HAS_SDPA else "matmul", decode=AUTO_DECODE)
    elif kind == "sdpa":
        if not HAS_SDPA:
            sys.exit(f"error: --attn sdpa needs torch >= 2.1 (this is {torch.__version__})")
        ATTN.update(train="sdpa", decode="sdpa")
    elif kind == "bcast":  # decode only; prefill and training as auto
        ATTN.update(train="sdpa" if HAS_SDPA else "matmul", decode="bcast")
    else:
        ATTN.update(train=kind, decode=kind)


class RMSNorm(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x):  # LlamaRMSNorm: normalise in float32, cast back, scale
        if HAS_RMS_NORM and x.dtype == torch.float32:
            return F.rms_norm(x, (x.shape[-1],), self.weight, EPS)
        x32 = x.float()
        return self.weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype)


def rope(x, cos, sin):
    """apply_rotary_pos_emb of HF LLaMA: x * cos + rotate_half(x) * sin."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def attend(q, k, v, bias, kind):
    """softmax(q k^T / sqrt(Dh) + bias) v: q [B, H, T, Dh], k and v [B, H_kv, L, Dh], bias [B, 1, T, L] (additive,
    float32) -> [B, H, T, Dh]."""
    b, h, t, dh = q.shape
    kv = k.shape[1]
    rep = h // kv
    if kind == "sdpa":
        if rep > 1 and SDPA_GQA:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=True)
        if rep > 1:  # HF repeat_kv
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    if kind == "bcast" and t == 1:  # one query per row: scores and weighted sum as broadcast products
        gq = q.reshape(b, kv, rep, 1, dh)
        scores = (gq * k.unsqueeze(2)).sum(-1) / math.sqrt(dh) + bias.reshape(b, 1, 1, -1)  # [B, H_kv, rep, L]
        w = torch.softmax(scores, dim=-1)
        return (w.unsqueeze(-1) * v.unsqueeze(2)).sum(-2).reshape(b, h, 1, dh)
    # HF eager attention without copying k/v per query head: a group's query heads stacked along the query axis.
    gq = q.reshape(b, kv, rep * t, dh)
    scores = torch.matmul(gq, k.transpose(-2, -1)).view(b, h, t, -1) / math.sqrt(dh) + bias
    w = torch.softmax(scores, dim=-1).view(b, kv, rep * t, -1)
    return torch.matmul(w, v).view(b, h, t, dh)


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

    def forward(self, x, cos, sin, bias, cache=None, start=0, fused=None):
        """x [B, T, D]; cos, sin [B, T, 1, Dh]; bias [B, 1, T, L]; cache: this layer's preallocated (k, v)
        [B, H_kv, capacity, Dh], positions [start, start + T) written in place; fused: (Wqkv, Wgate_up)."""
        b, t, _ = x.shape
        h, kv, dh = self.h, self.kv, self.dh
        y = self.ln1(x)
        if fused is not None:  # one projection; rotary on the q and k heads together
            qkv = F.linear(y, fused[0]).view(b, t, h + 2 * kv, dh)
            qk = rope(qkv[:, :, :h + kv], cos, sin)
            q, k = qk[:, :, :h].transpose(1, 2), qk[:, :, h:].transpose(1, 2)
            v = qkv[:, :, h + kv:].transpose(1, 2)
        else:
            cos_t, sin_t = cos.transpose(1, 2), sin.transpose(1, 2)  # [B, 1, T, Dh]
            q = rope(self.q(y).view(b, t, h, dh).transpose(1, 2), cos_t, sin_t)
            k = rope(self.k(y).view(b, t, kv, dh).transpose(1, 2), cos_t, sin_t)
            v = self.v(y).view(b, t, kv, dh).transpose(1, 2)
        kind = ATTN["train"]
        if cache is not None:
            cache[0][:, :, start:start + t] = k
            cache[1][:, :, start:start + t] = v
            k, v = cache[0][:, :, :start + t], cache[1][:, :, :start + t]
            if t == 1:
                kind = ATTN["decode"]
        out = attend(q, k, v, bias, kind)
        x = x + self.o(out.transpose(1, 2).reshape(b, t, h * dh))
        y = self.ln2(x)
        if fused is not None:
            gate, up = F.linear(y, fused[1]).chunk(2, dim=-1)
        else:
            gate, up = self.gate(y), self.up(y)
        return x + self.down(F.silu(gate) * up)


class Model(torch.nn.Module):
    """Backbone + tied LM head (logits), or + value head (the critic). Init: N(0, 0.02) weights, norms 1, biases 0."""

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
                torch.nn.init.normal_(p, 0.0, INIT_STD)
            elif name.endswith("bias"):
                torch.nn.init.zeros_(p)
        dh = s["hidden"] // s["heads"]
        inv_freq = 1.0 / THETA ** (torch.arange(0, dh, 2).float() / dh)
        freqs = torch.arange(512).float()[:, None] * inv_freq
        angles = torch.cat((freqs, freqs), -1)
        self.cos_table, self.sin_table = angles.cos(), angles.sin()  # [positions, Dh], computed once

    def fused_weights(self):
        """[q; k; v] and [gate; up] per layer, concatenated once per generation (the weights do not change in one)."""
        return [(torch.cat((l.q.weight, l.k.weight, l.v.weight)), torch.cat((l.gate.weight, l.up.weight)))
                for l in self.layers]

    def hidden(self, ids, positions, bias, caches=None, start=0, fused=None):
        """ids, positions [B, T]; bias [B, 1, T, L] -> final-norm hidden states [B, T, D]."""
        cos = self.cos_table[positions].unsqueeze(2)  # [B, T, 1, Dh]
        sin = self.sin_table[positions].unsqueeze(2)
        x = self.embed(ids)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, bias, None if caches is None else caches[i], start,
                      None if fused is None else fused[i])
        return self.norm(x)

    def logits(self, hidden):
        return F.linear(hidden, self.embed.weight)


def causal_bias(mask, t):
    """Additive [B, 1, t, L] mask for the last t of L positions: 0 where the key is real and not in the query's
    future, else LOWEST."""
    total = mask.shape[1]
    q_pos = torch.arange(total - t, total)[:, None]
    allowed = (torch.arange(total)[None, :] <= q_pos)[None, None] & mask.bool()[:, None, None, :]
    return torch.zeros(allowed.shape).masked_fill_(~allowed, LOWEST)


def positions_of(mask):
    return (mask.cumsum(1) - 1).clamp_min(0)


def sample(logits, u):
    """Inverse CDF over softmax(logits) at temperature 1, in vocabulary order (ppo.cpp's rule): the first token whose
    CDF exceeds u * total. Returns the tokens [B] and their log-probs [B]."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    cdf = logp.exp().double().cumsum(-1)
    target = u[:, None] * (cdf[:, -1:] * (1.0 - 2.0 ** -52))
    tok = (cdf <= target).sum(-1)
    return tok, logp.gather(-1, tok[:, None]).squeeze(-1)


def generate(model, ids, mask, new_tokens, uniforms, eos_id=-1, check_interval=8):
    """Left-padded prompts ids, mask [B, P]; uniforms [B, R] float64. Every row samples R tokens, or with eos_id >= 0
    until it samples EOS (the loop ends once every row has; checked every check_interval steps, as ppo.cpp's
    rollout.check_interval). Returns tokens [B, R] (PAD after EOS), their log-probs and the response mask."""
    b, p = ids.shape
    s = model.s
    kv, dh = s["kv_heads"], s["hidden"] // s["heads"]
    capacity = p + new_tokens
    caches = [(torch.empty(b, kv, capacity, dh), torch.empty(b, kv, capacity, dh)) for _ in range(s["layers"])]
    fused = model.fused_weights()
    key_bias = torch.full((b, capacity), LOWEST)
    key_bias[:, :p].masked_fill_(mask.bool(), 0.0)
    positions = positions_of(mask)
    hidden = model.hidden(ids, positions, causal_bias(mask, p), caches, 0, fused)[:, -1]
    pos = positions[:, -1:] + 1
    tokens = torch.full((b, new_tokens), PAD, dtype=torch.long)
    log_probs = torch.zeros(b, new_tokens)
    running = torch.ones(b, dtype=torch.bool)
    for t in range(new_tokens):
        tok, lp = sample(model.logits(hidden), uniforms[:, t])
        tokens[:, t] = tok
        log_probs[:, t] = lp
        if eos_id >= 0:
            running &= tok != eos_id
            if (t + 1) % check_interval == 0 and not bool(running.any()):
                break
        if t + 1 == new_tokens:
            break
        key_bias[:, p + t] = 0.0
        hidden = model.hidden(tok[:, None], pos, key_bias[:, None, None, :p + t + 1], caches, p + t, fused)[:, 0]
        pos = pos + 1
    is_eos = (tokens == eos_id).long()
    response_mask = ((is_eos.cumsum(1) - is_eos) == 0).float()  # through the first EOS
    return tokens * response_mask.long(), log_probs * response_mask, response_mask


def bench_prompts(batch, length):
    """bench_generate's prompts: BOS, then 4 + (i * 7 + j * 3) % 90 (no padding)."""
    ids = torch.tensor([[BOS] + [4 + (i * 7 + j * 3) % 90 for j in range(1, length)] for i in range(batch)])
    return ids, torch.ones_like(ids)


def blas():
    cfg = torch.__config__.show()
    return "mkl" if "BLAS_INFO=mkl" in cfg else "openblas" if "openblas" in cfg.lower() else \
        "system libblas (Debian: OpenBLAS)" if "BLAS_INFO=generic" in cfg else "?"


def cmd_generate(a):
    model = Model(SHAPES[a.model]).eval()
    ids, mask = bench_prompts(a.batch, a.prompt_len)
    uniforms = torch.rand(a.batch, a.new_tokens, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    best = float("inf")
    with torch.inference_mode():
        for r in range(a.repeats + 1):  # the first run is the warm-up
            start = time.perf_counter()
            tokens, _, response_mask = generate(model, ids, mask, a.new_tokens, uniforms)
            if r > 0:
                best = min(best, time.perf_counter() - start)
            assert float(response_mask.sum()) == a.batch * a.new_tokens
    print(json.dumps(dict(impl="eager", torch=torch.__version__, blas=blas(), attn=f"{ATTN['train']}/{ATTN['decode']}",
                          model=a.model, threads=a.threads, batch=a.batch, prompt_len=a.prompt_len,
                          new_tokens=a.new_tokens, seconds=round(best, 6),
                          tokens_per_s=round(a.batch * a.new_tokens / best, 1),
                          params=sum(p.numel() for p in model.parameters()))))


# ------------------------------------------------------------------------------------------------ the PPO step

def char_id(c):
    return 4 + ord(c) - 32


def response_text(ids):
    out = []
    for i in ids:
        if i in (PAD, EOS):
            break
        out.append("\n" if i == 3 else chr(32 + i - 4) if 4 <= i < VOCAB else "?")
    return "".join(out)


def reverse_score(response, target):
    """The reverse task's reward (tasks/task.cpp): right digits in the right places, right length, digits at all."""
    given = response.rstrip()
    denom = max(len(target), len(given))
    if denom == 0:
        return 1.0
    matches = sum(x == y for x, y in zip(target, given))
    digits = sum(c.isdigit() for c in given)
    return (0.6 * matches / denom + 0.2 * (1 - abs(len(given) - len(target)) / denom)
            + (0.2 * digits / len(given) if given else 0.0))


def left_pad(rows):
    """Rows of ids -> ids, mask [B, P] left-padded to the longest row (ppo.cpp's prompt width)."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), PAD, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r)
        mask[i, width - len(r):] = 1
    return ids, mask


def response_log_probs(model, ids, mask, positions, r, with_entropy=False):
    """Log-probs of the last r tokens (a forward of the whole sequence; logits of the r predicting positions only),
    and their entropy when asked (a metric: no gradient)."""
    t = ids.shape[1]
    logits = model.logits(model.hidden(ids, positions, causal_bias(mask, t))[:, t - r - 1:t - 1]).float()
    lse = torch.logsumexp(logits, dim=-1)
    lp = logits.gather(-1, ids[:, t - r:, None]).squeeze(-1) - lse
    if not with_entropy:
        return lp, None
    with torch.no_grad():
        x = logits.detach()
        return lp, lse.detach() - (torch.softmax(x, -1) * x).sum(-1)


def response_values(critic, ids, mask, positions, r, response_mask):
    """veRL / ppo.cpp: the value of the state before each response token."""
    t = ids.shape[1]
    hidden = critic.hidden(ids, positions, causal_bias(mask, t))[:, t - r - 1:t - 1]
    return critic.value(hidden).squeeze(-1).float() * response_mask


def masked_mean(x, mask):
    return (x * mask).sum() / mask.sum().clamp_min(1e-8)


def whiten(x, mask):
    """rl/algorithms.cpp masked_whiten: float64 sums, unbiased variance."""
    x64, m64 = x.double(), mask.double()
    total, sq, n = torch.stack(((x64 * m64).sum(), (x64 * x64 * m64).sum(), m64.sum())).tolist()
    mean = total / n
    var = max(0.0, (sq - n * mean * mean) / (n - 1))
    return (x - mean) * (1.0 / math.sqrt(var + 1e-8))


def gae(rewards, values, mask, gamma, lam):
    """rl/advantages.cpp compute_gae (veRL): reverse scan, masked positions carry the state; advantages whitened."""
    on = mask > 0
    next_values = torch.zeros(values.shape[0])
    last = torch.zeros(values.shape[0])
    columns = []
    for t in reversed(range(values.shape[1])):
        v = values[:, t]
        delta = rewards[:, t] + gamma * next_values - v
        last_t = delta + gamma * lam * last
        next_values = torch.where(on[:, t], v, next_values)
        last = torch.where(on[:, t], last_t, last)
        columns.append(last)
    advantages = torch.stack(columns[::-1], 1)
    return whiten(advantages, mask), advantages + values


def policy_loss(old, lp, adv, mask, denominator, clip_low, clip_high, clip_c):
    """rl/losses.cpp policy_loss (veRL's dual-clip PPO), token-mean over `denominator` tokens."""
    neg_kl = (lp - old).clamp(-20.0, 20.0)
    ratio = neg_kl.exp()
    ppo_kl = masked_mean(-neg_kl.detach(), mask)
    loss1 = -adv * ratio
    loss2 = -adv * ratio.clamp(1 - clip_low, 1 + clip_high)
    clipped1 = torch.maximum(loss1, loss2)
    clipfrac = masked_mean((loss2 > loss1).float(), mask)
    loss3 = -adv * clip_c
    clipped2 = torch.minimum(loss3, clipped1)
    negative = adv < 0
    clipfrac_lower = masked_mean(((clipped1 > loss3) & negative).float(), mask)
    losses = torch.where(negative, clipped2, clipped1)
    return (losses * mask).sum() / denominator, clipfrac, clipfrac_lower, ppo_kl


def low_var_kl(lp, ref):
    kl = (ref - lp).clamp(-20.0, 20.0)
    return (kl.exp() - kl - 1).clamp(-10.0, 10.0)


def optimizer(params, lr):
    extra = {"fused": True} if FUSED_ADAMW else {}
    return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, **extra)


def clip_(model, max_norm):
    extra = {"foreach": True} if CLIP_FOREACH else {}
    return float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm, **extra))  # one host read, as ppo.cpp


class Batch:
    """A PPO batch as the trainer holds it: ids and mask [B, P + R] (prompts left-padded, responses right-padded),
    position ids from the mask, and the response mask [B, R] (float)."""

    def __init__(self, ids, mask, response_mask):
        self.ids, self.mask, self.response_mask = ids, mask, response_mask
        self.positions = positions_of(mask)
        self.rows, self.r = response_mask.shape

    def micro(self, size):
        return [slice(i, i + size) for i in range(0, self.rows, size)]


def infer_log_probs(model, b, micro):
    """Response log-probs [B, R] under inference_mode, micro-batches of `micro` rows (old and reference log-probs)."""
    model.eval()
    with torch.inference_mode():
        return torch.cat([response_log_probs(model, b.ids[c], b.mask[c], b.positions[c], b.r)[0]
                          for c in b.micro(micro)]).clone()


def infer_values(critic, b, micro):
    """Critic values [B, R] under inference_mode, micro-batches of `micro` rows."""
    critic.eval()
    with torch.inference_mode():
        return torch.cat([response_values(critic, b.ids[c], b.mask[c], b.positions[c], b.r, b.response_mask[c])
                          for c in b.micro(micro)]).clone()


def update_critic(critic, opt, b, values, returns, micro, cliprange=0.5):
    """One mini-batch (the whole batch) in micro-batches of `micro` rows: clipped value loss, token-mean over the
    batch's response tokens, grad-norm clip 1.0, an AdamW step. Returns the metrics (loss terms: last micro-batch)."""
    denominator = float(b.response_mask.sum())
    metrics = {}
    critic.train()
    opt.zero_grad(set_to_none=True)
    for c in b.micro(micro):
        m = b.response_mask[c]
        v = response_values(critic, b.ids[c], b.mask[c], b.positions[c], b.r, m)
        clipped = torch.maximum(torch.minimum(v, values[c] + cliprange), values[c] - cliprange)
        loss1, loss2 = (v - returns[c]) ** 2, (clipped - returns[c]) ** 2
        loss = 0.5 * (torch.maximum(loss1, loss2) * m).sum() / denominator
        loss.backward()
        metrics["critic/vf_loss"] = loss.item()
        metrics["critic/vf_clipfrac"] = masked_mean((loss2 > loss1).float(), m).item()
    metrics["critic/grad_norm"] = clip_(critic, 1.0)
    opt.step()
    return metrics


def update_actor(actor, opt, b, old, ref_lp, advantages, micro, kl_loss_coef):
    """One mini-batch (the whole batch) in micro-batches of `micro` rows: dual-clip PPO loss (clip 0.2, clip_ratio_c
    3) + kl_loss_coef x low_var_kl to the reference, token-mean over the batch's response tokens, the entropy metric,
    grad-norm clip 1.0, an AdamW step. Returns the metrics (loss terms: last micro-batch)."""
    denominator = float(b.response_mask.sum())
    metrics = {}
    actor.train()
    opt.zero_grad(set_to_none=True)
    for c in b.micro(micro):
        m = b.response_mask[c]
        lp, entropy = response_log_probs(actor, b.ids[c], b.mask[c], b.positions[c], b.r, with_entropy=True)
        pg, clipfrac, clipfrac_lower, ppo_kl = policy_loss(old[c], lp, advantages[c], m, denominator, 0.2, 0.2, 3.0)
        kl = low_var_kl(lp, ref_lp[c])
        loss = pg + kl_loss_coef * (kl * m).sum() / denominator
        loss.backward()
        metrics.update({"actor/pg_loss": pg.item(), "actor/pg_clipfrac": clipfrac.item(),
                        "actor/pg_clipfrac_lower": clipfrac_lower.item(), "actor/ppo_kl": ppo_kl.item(),
                        "actor/entropy": masked_mean(entropy, m).item(),
                        "actor/kl_loss": masked_mean(kl.detach(), m).item()})
    metrics["actor/grad_norm"] = clip_(actor, 1.0)
    opt.step()
    return metrics


def ppo_models(shape, lr):
    """Actor and reference (the same init), critic (its own seed, a value head), and the two AdamW optimizers."""
    actor, ref, critic = Model(shape, seed=0), Model(shape, seed=0), Model(shape, value_head=True, seed=1)
    ref.eval()
    return actor, ref, critic, optimizer(actor.parameters(), lr), optimizer(critic.parameters(), lr)


def cmd_ppo_step(a):
    """One PPO step of configs/bench_memory.yaml over configs/ppo_trainer.yaml's defaults, as `ppo train` runs it:
    16 reverse prompts of 12-16 digits x rollout.n 4 = 64 rows, responses of at most 24 tokens (EOS stops a row) at
    temperature 1; old log-probs (micro-batches of 16), reference log-probs (a third model, 16), critic values
    (critic micro-batches: 32); the reverse task's reward at the last response token; GAE (gamma = lam = 1), whitened;
    the critic update (clipped value loss, cliprange_value 0.5) and the actor update (dual-clip PPO loss, clip 0.2,
    clip_ratio_c 3, + 0.001 x low_var_kl to the reference), each one mini-batch of 64 rows in micro-batches of 32,
    token-mean, grad-norm clip 1.0, AdamW lr 1e-4, betas (0.9, 0.999), eps 1e-8, no weight decay, 1 epoch."""
    prompts_per_step, n, R, eos = 16, 4, 24, EOS
    log_prob_micro, critic_micro, update_micro = 16, 32, 32
    actor, ref, critic, opt_actor, opt_critic = ppo_models(SHAPES[a.model], 1e-4)
    gen = torch.Generator().manual_seed(0)
    names = ("generate", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor")
    phases = {k: [] for k in names}
    steps, tokens, response_tokens, scores = [], [], [], []
    for _ in range(a.steps):
        marks = [time.perf_counter()]
        rows, targets = [], []
        for _ in range(prompts_per_step):
            digits = "".join(str(d) for d in torch.randint(0, 10, (int(torch.randint(12, 17, (1,), generator=gen)),),
                                                           generator=gen).tolist())
            rows += [[BOS] + [char_id(c) for c in digits + ">"]] * n
            targets += [digits[::-1]] * n
        ids, mask = left_pad(rows)
        B = ids.shape[0]
        uniforms = torch.rand(B, R, dtype=torch.float64, generator=gen)
        with torch.inference_mode():
            actor.eval()
            responses, _, response_mask = generate(actor, ids, mask, R, uniforms, eos_id=eos)
        responses, response_mask = responses.clone(), response_mask.clone()  # normal tensors for autograd
        marks.append(time.perf_counter())
        score = torch.tensor([reverse_score(response_text(r), t) for r, t in zip(responses.tolist(), targets)])
        last = (response_mask.sum(1) - 1).clamp_min(0).long()
        token_rewards = torch.zeros(B, R)
        token_rewards[torch.arange(B), last] = score
        marks.append(time.perf_counter())
        b = Batch(torch.cat((ids, responses), 1), torch.cat((mask, response_mask.long()), 1), response_mask)
        old = infer_log_probs(actor, b, log_prob_micro)
        marks.append(time.perf_counter())
        ref_lp = infer_log_probs(ref, b, log_prob_micro)
        marks.append(time.perf_counter())
        values = infer_values(critic, b, critic_micro)
        marks.append(time.perf_counter())
        advantages, returns = gae(token_rewards, values, response_mask, gamma=1.0, lam=1.0)
        advantages, returns = advantages * response_mask, returns * response_mask
        marks.append(time.perf_counter())
        metrics = update_critic(critic, opt_critic, b, values, returns, update_micro)
        marks.append(time.perf_counter())
        metrics.update(update_actor(actor, opt_actor, b, old, ref_lp, advantages, update_micro, 0.001))
        marks.append(time.perf_counter())
        for k, t0, t1 in zip(names, marks, marks[1:]):
            phases[k].append(t1 - t0)
        steps.append(marks[-1] - marks[0])
        tokens.append(float(b.mask.sum()))
        response_tokens.append(float(response_mask.sum()))
        scores.append(float(score.mean()))
    tail = slice(1, None) if a.steps > 1 else slice(0, None)  # steps 2..S
    print(json.dumps(dict(impl="eager", torch=torch.__version__, blas=blas(), attn=f"{ATTN['train']}/{ATTN['decode']}",
                          model=a.model, threads=a.threads, steps=a.steps, rows=prompts_per_step * n,
                          step_s=round(statistics.median(steps[tail]), 4),
                          tokens_per_step=round(statistics.mean(tokens[tail]), 1),
                          response_tokens_per_step=round(statistics.mean(response_tokens[tail]), 1),
                          score_mean=round(statistics.mean(scores[tail]), 4),
                          phases={k: round(statistics.median(v[tail]), 4) for k, v in phases.items()})))


def load_batch(path):
    """A batch file (JSON, written by a C++ benchmark): rows, prompt_width, response_width; input_ids and
    attention_mask [B, P + R] (prompts left-padded, responses right-padded); old_log_probs, ref_log_probs, advantages,
    returns, values [B, R] (0 on padding); log_prob_micro, critic_micro, update_micro, lr, kl_loss_coef.
    Returns the Batch, those five tensors by name, and the file's object."""
    with open(path) as f:
        d = json.load(f)
    rows, p, r = d["rows"], d["prompt_width"], d["response_width"]
    ids = torch.tensor(d["input_ids"], dtype=torch.long)
    mask = torch.tensor(d["attention_mask"], dtype=torch.long)
    if ids.shape != (rows, p + r) or mask.shape != ids.shape:
        sys.exit(f"error: {path}: input_ids {tuple(ids.shape)}, attention_mask {tuple(mask.shape)}; "
                 f"rows x (prompt_width + response_width) is {rows} x {p + r}")
    if int(ids.min()) < 0 or int(ids.max()) >= VOCAB:
        sys.exit(f"error: {path}: token ids outside [0, {VOCAB})")
    inputs = {}
    for k in ("old_log_probs", "ref_log_probs", "advantages", "returns", "values"):
        inputs[k] = torch.tensor(d[k], dtype=torch.float32)
        if inputs[k].shape != (rows, r):
            sys.exit(f"error: {path}: {k} {tuple(inputs[k].shape)}, not rows x response_width = {rows} x {r}")
    return Batch(ids, mask, mask[:, p:].float()), inputs, d


def cmd_phases(a):
    """The training side of cmd_ppo_step on a batch from a file (no generation, reward or advantages): old
    log-probs, reference log-probs, values, the critic update and the actor update, each as cmd_ppo_step runs it,
    with the file's micro-batch sizes, lr and kl_loss_coef. The updates take the file's old/ref log-probs,
    advantages, returns and values, so both sides do the same work; the three forwards still run, for their time.
    One warm-up round, then --repeats rounds (the models train on); the median of each phase and of their sum."""
    b, x, d = load_batch(a.batch)
    actor, ref, critic, opt_actor, opt_critic = ppo_models(SHAPES[a.model], d["lr"])
    names = ("old_log_prob", "ref", "values", "update_critic", "update_actor")
    phases = {k: [] for k in names}
    totals = []
    for repeat in range(a.repeats + 1):  # the first round is the warm-up
        marks = [time.perf_counter()]
        infer_log_probs(actor, b, d["log_prob_micro"])
        marks.append(time.perf_counter())
        infer_log_probs(ref, b, d["log_prob_micro"])
        marks.append(time.perf_counter())
        infer_values(critic, b, d["critic_micro"])
        marks.append(time.perf_counter())
        update_critic(critic, opt_critic, b, x["values"], x["returns"], d["update_micro"])
        marks.append(time.perf_counter())
        update_actor(actor, opt_actor, b, x["old_log_probs"], x["ref_log_probs"], x["advantages"], d["update_micro"],
                     d["kl_loss_coef"])
        marks.append(time.perf_counter())
        if repeat > 0:
            for k, t0, t1 in zip(names, marks, marks[1:]):
                phases[k].append(t1 - t0)
            totals.append(marks[-1] - marks[0])
    print(json.dumps(dict(impl="eager", torch=torch.__version__, blas=blas(), attn=f"{ATTN['train']}/{ATTN['decode']}",
                          model=a.model, threads=a.threads, rows=b.rows, tokens=int(b.mask.sum()),
                          response_tokens=int(b.response_mask.sum()), padded_tokens=b.ids.numel(),
                          repeats=a.repeats, phases={k: round(statistics.median(v), 6) for k, v in phases.items()},
                          training_s=round(statistics.median(totals), 6))))


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
