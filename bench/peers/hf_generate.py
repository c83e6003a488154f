#!/usr/bin/env python3
"""transformers' generate on ppo.cpp's benchmark shapes, for bench/peers.sh: the eager port's model (ppo.cpp's tiny or
8-layer shape, tied embeddings, no bias, N(0, 0.02) init, norms 1; eager_port.hf_twin) as a LlamaForCausalLM, saved
as a Hugging Face folder with save_pretrained and loaded back with from_pretrained, then timed generating --new-tokens tokens for every row:
sampling at temperature 1 (top_k 0, top_p 1: no warper), KV cache (transformers' default DynamicCache and its default
attention, sdpa), left-padded prompts with their attention mask (the benchmark's prompts all have the same length).

No EOS stopping, as `bench_generate --eos-id -1`: eos_token_id=None, so every row generates exactly R tokens. (The
equivalent min_new_tokens=R keeps an EOS id and adds a logits processor that masks it every step: measured 10%
slower on the tiny model, so the peer would be handicapped by the way of asking.)

  hf_generate.py --model tiny|8layer --threads N --batch B --prompt-len P --new-tokens R --repeats K

Prints one JSON line (best of K after one warm-up). Runs in the reference environment (.venv-ref).
"""
import argparse
import json
import tempfile
import time

import torch
import transformers
from transformers import LlamaForCausalLM
from transformers.utils import logging

from eager_model import PAD, SHAPES, Model, bench_prompts, blas, causal_bias, positions_of
from eager_port import decode_args, hf_twin, parse


def main():
    a = parse(decode_args(argparse.ArgumentParser(description="transformers' generate on ppo.cpp's shapes")))
    logging.disable_progress_bar()
    ours = Model(SHAPES[a.model]).eval()
    with tempfile.TemporaryDirectory() as folder:
        hf_twin(ours).save_pretrained(folder)  # the eager port's model and weights
        model = LlamaForCausalLM.from_pretrained(folder).eval()
    ids, mask = bench_prompts(a.batch, a.prompt_len)
    with torch.inference_mode():  # the folder holds the same model: same logits
        positions = positions_of(mask)
        diff = (model(input_ids=ids, attention_mask=mask).logits
                - ours.logits(ours.hidden(ids, positions, causal_bias(mask, a.prompt_len)))).abs().max()
        assert diff < 1e-4, f"the HF folder's logits differ from the eager port's by {float(diff)}"
    best = float("inf")
    with torch.inference_mode():
        for r in range(a.repeats + 1):  # the first run is the warm-up
            start = time.perf_counter()
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0,
                                 top_p=1.0, max_new_tokens=a.new_tokens, eos_token_id=None, use_cache=True,
                                 pad_token_id=PAD)
            if r > 0:
                best = min(best, time.perf_counter() - start)
            assert out.shape == (a.batch, a.prompt_len + a.new_tokens), out.shape
    print(json.dumps(dict(impl="transformers", transformers=transformers.__version__, torch=torch.__version__,
                          blas=blas(), attn=model.config._attn_implementation, model=a.model, threads=a.threads,
                          batch=a.batch, prompt_len=a.prompt_len, new_tokens=a.new_tokens, seconds=round(best, 6),
                          tokens_per_s=round(a.batch * a.new_tokens / best, 1),
                          params=sum(p.numel() for p in model.parameters()))))


if __name__ == "__main__":
    main()
