#!/usr/bin/env python3
"""transformers' generate on ppo.cpp's benchmark shapes, for bench/peers.sh: a LlamaForCausalLM with the shape of
ppo.cpp's tiny or 8-layer model (tied embeddings, no bias, N(0, 0.02) init), saved as a Hugging Face folder and loaded
back, then timed generating --new-tokens tokens for every row (sampling at temperature 1, no EOS stop, KV cache).

  hf_generate.py --model tiny|8layer --threads N --batch B --prompt-len P --new-tokens R --repeats K

Prints one JSON line. Runs in the reference environment (.venv-ref).
"""
import argparse
import json
import tempfile
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from eager_port import SHAPES, decode_args, parse  # the same shapes and arguments as the eager port


def main():
    a = parse(decode_args(argparse.ArgumentParser()))
    s = SHAPES[a.model]
    cfg = LlamaConfig(vocab_size=99, hidden_size=s["hidden"], intermediate_size=s["inter"],
                      num_hidden_layers=s["layers"], num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"],
                      rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True, attention_bias=False,
                      max_position_embeddings=512, initializer_range=0.02, pad_token_id=0, bos_token_id=1,
                      eos_token_id=2)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as folder:
        LlamaForCausalLM(cfg).save_pretrained(folder)
        model = LlamaForCausalLM.from_pretrained(folder).eval()
    ids = torch.tensor([[1] + [4 + (i * 7 + j * 3) % 90 for j in range(1, a.prompt_len)] for i in range(a.batch)])
    mask = torch.ones_like(ids)
    best = float("inf")
    with torch.inference_mode():
        for r in range(a.repeats + 1):  # the first run is the warm-up
            start = time.perf_counter()
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0,
                                 top_p=1.0, max_new_tokens=a.new_tokens, min_new_tokens=a.new_tokens, use_cache=True,
                                 pad_token_id=0)
            if r > 0:
                best = min(best, time.perf_counter() - start)
            assert out.shape[1] == a.prompt_len + a.new_tokens
    import transformers
    print(json.dumps(dict(impl="transformers", transformers=transformers.__version__, torch=torch.__version__,
                          model=a.model, threads=a.threads, batch=a.batch, prompt_len=a.prompt_len,
                          new_tokens=a.new_tokens, seconds=round(best, 6),
                          tokens_per_s=round(a.batch * a.new_tokens / best, 1),
                          params=sum(p.numel() for p in model.parameters()))))


if __name__ == "__main__":
    main()
