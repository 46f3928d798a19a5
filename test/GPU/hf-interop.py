#!/usr/bin/env python3
"""Hugging Face interop on a GPU machine: a model the trainer fine-tuned and
wrote with --export-safetensors DIR --hf-config config.json loads with
transformers' AutoModelForCausalLM.from_pretrained(DIR) and reproduces the
trainer's loss of the final weights (its --eval-data loss on the training
batch) on the GPU, in fp32.

    python3 test/GPU/hf-interop.py DIR IDS.npy LOG.jsonl

Prepared here (no transformers needed) by bench/prepare-long-context.sh.
"""
import json
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM

directory, ids_path, log_path = sys.argv[1:4]
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
rondo = [json.loads(l) for l in open(log_path) if "eval_loss" in l][-1]["eval_loss"]
model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).cuda().eval()
ids = torch.from_numpy(np.load(ids_path)).cuda()
with torch.no_grad():
    loss = model(input_ids=ids, labels=ids).loss.item()
rel = abs(loss - rondo) / abs(rondo)
print("transformers %s loaded %s: loss %.7f on the GPU, trainer's %.7f, relative difference %.2e: %s"
      % (__import__("transformers").__version__, directory, loss, rondo, rel,
         "MATCH" if rel <= 1e-5 else "MISMATCH"))
sys.exit(0 if rel <= 1e-5 else 1)
