#!/usr/bin/env python3
"""The GPU decode benchmark's peer and floor (bench/gpu.sh), on Qwen2.5-0.5B's shape (configs/bench_qwen2.5-0.5b.yaml)
with random weights in bfloat16:
  - transformers' generate, sampling at temperature 1 with no warper and no EOS (every row makes --new-tokens tokens,
    as `bench_generate --eos-id -1`), left-padded prompts of --prompt-len tokens, with the cache named by --cache:
    dynamic (DynamicCache, transformers' default), static (StaticCache, no compile) or compiled (StaticCache and the
    torch.compile'd forward that generate uses with it);
  - the bandwidth floor: the bytes one decode step must read (every weight once, and the KV cache of every row so
    far), divided by the measured device-to-device copy bandwidth, averaged over the steps;
  - --train: the training step's peer in PyTorch eager (transformers' Qwen2 with its default sdpa attention): the
    forward of --batch rows of --prompt-len + --new-tokens random tokens, the log-probs of the last --new-tokens in
    float32, their negated mean as the loss, and the backward; no optimizer step. The same work as
    `bench_generate --train` (ppo.cpp's compute_log_probs, as the actor update runs it).

  hf_decode.py --cache dynamic|static|compiled [--batch 64] [--prompt-len 16] [--new-tokens 256] [--repeats 3]
  hf_decode.py --floor [--batch 64] [--prompt-len 16] [--new-tokens 256]
  hf_decode.py --train [--batch 64] [--prompt-len 16] [--new-tokens 256] [--repeats 3]
  --tiny: a 2-layer, width-64 model of the same form (to check the script on a CPU).

Prints one JSON line (best of --repeats after one warm-up).
"""
import argparse
import json
import time

import torch
import transformers
from transformers import Qwen2Config, Qwen2ForCausalLM
from transformers.utils import logging


def shape(tiny):
    if tiny:
        return Qwen2Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           intermediate_size=128, vocab_size=1000, max_position_embeddings=512,
                           tie_word_embeddings=True)
    return Qwen2Config(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                       intermediate_size=4864, vocab_size=151936, max_position_embeddings=512, rope_theta=1e6,
                       rms_norm_eps=1e-6, tie_word_embeddings=True)


def device_and_dtype():
    if torch.cuda.is_available():
        return torch.device("cuda"), torch.bfloat16
    return torch.device("cpu"), torch.float32


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def copy_bandwidth(device, gib=1, repeats=10):
    """Device-to-device copy, bytes read plus bytes written per second (best of `repeats`)."""
    n = gib << 30
    a = torch.empty(n, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    b.copy_(a)
    best = float("inf")
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        b.copy_(a)
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return 2 * n / best


def floor(a, config, device):
    weights = 0
    model = Qwen2ForCausalLM(config)
    weights = sum(p.numel() for p in model.parameters()) * 2  # bfloat16, the tied head counted once
    del model
    head_dim = config.hidden_size // config.num_attention_heads
    kv_per_token = config.num_hidden_layers * 2 * config.num_key_value_heads * head_dim * 2  # k and v, bfloat16
    steps = a.new_tokens
    # Step s (0-based) reads the cache of prompt_len + s positions per row.
    kv = sum(a.batch * kv_per_token * (a.prompt_len + s) for s in range(steps))
    bandwidth = copy_bandwidth(device)
    seconds = (steps * weights + kv) / bandwidth
    return {"impl": "floor", "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
            "batch": a.batch, "prompt_len": a.prompt_len, "new_tokens": a.new_tokens,
            "weight_bytes": weights, "kv_bytes_all_steps": kv, "copy_bandwidth_gb_s": bandwidth / 1e9,
            "seconds": seconds, "tokens_per_s": a.batch * steps / seconds}


def decode(a, config, device, dtype):
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(device=device, dtype=dtype).eval()
    ids = torch.randint(4, 94, (a.batch, a.prompt_len), device=device)
    mask = torch.ones_like(ids)
    kwargs = dict(max_new_tokens=a.new_tokens, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                  eos_token_id=None, pad_token_id=0)
    if a.cache in ("static", "compiled"):
        kwargs["cache_implementation"] = "static"
        kwargs["disable_compile"] = a.cache == "static"
    best = float("inf")
    with torch.inference_mode():
        for r in range(a.repeats + 1):  # the first run warms up (and compiles)
            synchronize(device)
            start = time.perf_counter()
            out = model.generate(input_ids=ids, attention_mask=mask, **kwargs)
            synchronize(device)
            seconds = time.perf_counter() - start
            assert out.shape[1] == a.prompt_len + a.new_tokens, out.shape
            if r > 0:
                best = min(best, seconds)
    return {"impl": "transformers", "version": transformers.__version__, "torch": torch.__version__,
            "cache": a.cache, "dtype": str(dtype).replace("torch.", ""), "batch": a.batch,
            "prompt_len": a.prompt_len, "new_tokens": a.new_tokens, "seconds": best,
            "tokens_per_s": a.batch * a.new_tokens / best,
            "params": sum(p.numel() for p in model.parameters())}


def train(a, config, device, dtype):
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(device=device, dtype=dtype).train()
    T, R = a.prompt_len + a.new_tokens, a.new_tokens
    ids = torch.randint(4, config.vocab_size, (a.batch, T), device=device)
    mask = torch.ones_like(ids)
    positions = torch.arange(T, device=device).expand(a.batch, T)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    best = float("inf")
    for r in range(a.repeats + 1):  # the first run warms up
        model.zero_grad(set_to_none=True)
        synchronize(device)
        start = time.perf_counter()
        hidden = model.model(input_ids=ids, attention_mask=mask, position_ids=positions).last_hidden_state
        logits = model.lm_head(hidden[:, T - R - 1:T - 1]).float()  # position T - R - 1 + j predicts token j
        log_probs = torch.log_softmax(logits, -1).gather(-1, ids[:, T - R:].unsqueeze(-1)).squeeze(-1)
        log_probs.mean().neg().backward()
        synchronize(device)
        if r > 0:
            best = min(best, time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None
    return {"impl": "pytorch-eager", "mode": "train", "transformers": transformers.__version__,
            "torch": torch.__version__, "dtype": str(dtype).replace("torch.", ""), "batch": a.batch,
            "prompt_len": a.prompt_len, "new_tokens": a.new_tokens, "seconds": best,
            "tokens_per_s": a.batch * T / best, "peak_memory_gb": peak,
            "params": sum(p.numel() for p in model.parameters())}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cache", choices=["dynamic", "static", "compiled"], default="dynamic")
    p.add_argument("--floor", action="store_true")
    p.add_argument("--train", action="store_true")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--tiny", action="store_true")
    a = p.parse_args()
    logging.disable_progress_bar()
    logging.set_verbosity_error()
    device, dtype = device_and_dtype()
    config = shape(a.tiny)
    if a.floor:
        result = floor(a, config, device)
    elif a.train:
        result = train(a, config, device, dtype)
    else:
        result = decode(a, config, device, dtype)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
