"""The eager port's decoder and generation loop (eager_port.py's model side): the attention setting (--attn), RMSNorm,
rotary embedding, attention, the decoder layer and model (+ LM or value head), masks and position ids, inverse-CDF
sampling, the KV-cache generation loop, the benchmark's prompts, the BLAS in use, and the `generate` command.
eager_port.py's docstring says what each piece ports from ppo.cpp; eager_ppo.py builds the PPO step on these."""
import json
import math
import sys
import time

import torch
import torch.nn.functional as F

SHAPES = {  # ppo.cpp's ModelConfig defaults, and the model of configs/bench_memory.yaml
    "tiny": dict(hidden=64, layers=2, heads=4, kv_heads=2, inter=128),
    "8layer": dict(hidden=256, layers=8, heads=8, kv_heads=4, inter=688),
}
VOCAB, THETA, EPS, INIT_STD = 99, 10000.0, 1e-6, 0.02  # the char tokenizer's vocabulary; ModelConfig defaults
PAD, BOS, EOS = 0, 1, 2  # CharTokenizer (text/tokenizer.h): printable character c has id 4 + ord(c) - 32
LOWEST = torch.finfo(torch.float32).min  # masked keys: float32's lowest, as ppo.cpp (a fully masked row is uniform)
VERSION = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
HAS_SDPA = VERSION >= (2, 1) and hasattr(F, "scaled_dot_product_attention")
SDPA_GQA = VERSION >= (2, 5)  # enable_gqa
HAS_RMS_NORM = hasattr(F, "rms_norm")  # torch >= 2.4; the same float32 arithmetic, fewer dispatches
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
