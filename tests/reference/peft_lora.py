"""PEFT as the oracle for ppo.cpp's LoRA (tests/model/test_lora_reference.cpp, [ref]).

    python peft_lora.py make MODEL_DIR ADAPTER_DIR [rslora|experts]
                                                       a random LoRA adapter (r 4, alpha 8, every linear layer, A and
                                                       B both random; with rslora, use_rslora=True: scaled by
                                                       alpha / sqrt(r); with experts, an MoE model's attention and its
                                                       stacked experts through target_parameters, PEFT's ParamWrapper)
                                                       on the Hugging Face model in MODEL_DIR, saved by
                                                       PeftModel.save_pretrained into ADAPTER_DIR
    python peft_lora.py run MODEL_DIR ADAPTER_DIR INPUTS OUT
                                                       PeftModel.from_pretrained(MODEL_DIR, ADAPTER_DIR): into OUT
                                                       (safetensors) its logits for INPUTS, the logits with the
                                                       adapters disabled, and merge_and_unload's weights (prefixed
                                                       "merged.")

INPUTS (JSON): {"ids": [[ids]]}, equal-length rows, no padding; logits [B, T, V] float32.
"""
import json
import sys

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]
TARGETS = ATTENTION + ["gate_proj", "up_proj", "down_proj"]
# An MoE model's experts (transformers 5 holds them stacked): PEFT names the MLP's targets by parameter. Naming
# gate_proj, up_proj and down_proj in target_modules instead would have PEFT convert them to these with a rank_pattern.
EXPERTS = ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]


def make(model_dir, adapter_dir, mode=""):
    torch.manual_seed(4321)
    base = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    experts = mode == "experts"
    config = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=ATTENTION if experts else TARGETS,
                        target_parameters=EXPERTS if experts else None, init_lora_weights=False,
                        use_rslora=mode == "rslora", task_type="CAUSAL_LM")
    model = get_peft_model(base, config)
    with torch.no_grad():  # B nonzero and A of a scale that moves the logits visibly
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(0.2 * torch.randn_like(p))
    model.save_pretrained(adapter_dir)


def run(model_dir, adapter_dir, inputs_path, out):
    ids = torch.tensor(json.load(open(inputs_path))["ids"], dtype=torch.long)
    base = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    model = PeftModel.from_pretrained(base, adapter_dir)
    model.eval()
    tensors = {}
    with torch.no_grad():
        tensors["logits"] = model(input_ids=ids).logits.float().contiguous()
        with model.disable_adapter():
            tensors["base_logits"] = model(input_ids=ids).logits.float().contiguous()
        merged = model.merge_and_unload()
        for name, p in merged.state_dict().items():
            tensors["merged." + name] = p.float().clone().contiguous()  # a tied head shares the embedding
    save_file(tensors, out)


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3], mode=sys.argv[4] if len(sys.argv) > 4 else "")
    elif sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
    else:
        sys.exit(f"unknown command {sys.argv[1]}")
