"""A compact Llama-family decoder written for torch.export over statickv's cache.

transformers' Llama keeps its cache inside Python objects, so it cannot take a
cache's buffers as inputs. This decoder takes everything a step needs as
tensors, so one exported program serves every step:

  forward(ids, positions, slots, masks, keys, values) -> logits [b, q, vocab]

  ids, positions  int64 [b, q]; positions < 0 mark padded tokens
  slots           one int64 [b, q] per layer type present ("full", then
                  "sliding"): StepPlan::write_slots of a layer of that type
  masks           one additive mask [b, 1, q, view_len] per layer type, in the
                  cache dtype: StepPlan::additive_mask (0 = attend)
  keys, values    one buffer per layer, [max_batch, kv_heads, slots_len,
                  head_dim]: Cache::keys(layer) / values(layer), whole

The cache writes go through torch.ops.statickv.cache_write (in place: the
schema marks keys and values mutable), and each layer attends to the first
view_len slots of rows 0..b-1 of its buffers, the views Cache::update returns.
Llama, Mistral (every layer sliding) and Qwen2 (q/k/v biases, per-layer
types), read from a Hugging Face checkpoint directory as docs/checkpoints.md
says statickv's own loader reads it.
"""

import json
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

# torch.ops.statickv.cache_write: from the C++ operator library when
# STATICKV_OPS_LIBRARY names it (libstatickv_ops.so of a CMake build, for a
# machine without the Python package), else from the Python package.
if os.environ.get("STATICKV_OPS_LIBRARY"):
    torch.ops.load_library(os.environ["STATICKV_OPS_LIBRARY"])
else:
    import statickv  # noqa: F401

LAYER_TYPES = ("full", "sliding")


def read_config(checkpoint):
    """The decoder's settings from config.json (the subset the cross-check
    checkpoints and SmolLM2 use); anything else is refused by name."""
    config = json.loads((Path(checkpoint) / "config.json").read_text())
    model_type = config.get("model_type")
    if model_type not in ("llama", "mistral", "qwen2"):
        raise ValueError(f"model_type: expected llama, mistral or qwen2 but got {model_type!r}")
    heads = config["num_attention_heads"]
    rope = config.get("rope_parameters") or {}
    if rope.get("rope_type", "default") != "default" or config.get("rope_scaling"):
        raise ValueError(f"rope_parameters: only the default rope is exported, got {rope}")
    layers = config["num_hidden_layers"]
    window = config.get("sliding_window")
    if model_type == "mistral":
        types = ["sliding" if window else "full"] * layers
    elif model_type == "qwen2" and config.get("use_sliding_window") and window:
        listed = config.get("layer_types")
        if listed:
            types = ["sliding" if t == "sliding_attention" else "full" for t in listed]
        else:
            first = config.get("max_window_layers", 28)
            types = ["sliding" if i >= first else "full" for i in range(layers)]
    else:
        types = ["full"] * layers
    if "sliding" not in types:
        window = 0
    return {
        "model_type": model_type,
        "num_layers": layers,
        "hidden": config["hidden_size"],
        "heads": heads,
        "kv_heads": config.get("num_key_value_heads") or heads,
        "head_dim": config.get("head_dim") or config["hidden_size"] // heads,
        "vocab": config["vocab_size"],
        "eps": config.get("rms_norm_eps", 1e-6),
        "theta": rope.get("rope_theta", config.get("rope_theta", 10000.0)),
        "tied": bool(config.get("tie_word_embeddings", False)),
        "qkv_bias": model_type == "qwen2" or bool(config.get("attention_bias", False)),
        "o_bias": model_type == "llama" and bool(config.get("attention_bias", False)),
        "layer_types": types,
        "sliding_window": window or 0,
    }


def rms_norm(x, weight, eps):
    """As transformers computes it: in float32, the weight applied after the
    cast back to the activation dtype."""
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Decoder(torch.nn.Module):
    def __init__(self, checkpoint, dtype=torch.float32):
        super().__init__()
        self.config = read_config(checkpoint)
        weights = load_file(str(Path(checkpoint) / "model.safetensors"))
        if self.config["tied"]:
            weights.setdefault("lm_head.weight", weights["model.embed_tokens.weight"])
        for name, tensor in weights.items():
            self.register_buffer(name.replace(".", "__"), tensor.to(dtype), persistent=False)
        c = self.config
        inv_freq = 1.0 / (c["theta"] ** (torch.arange(0, c["head_dim"], 2).float() / c["head_dim"]))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.present = [t for t in LAYER_TYPES if t in c["layer_types"]]

    def w(self, name):
        return getattr(self, name.replace(".", "__"))

    def linear(self, x, name, bias):
        return F.linear(x, self.w(name + ".weight"), self.w(name + ".bias") if bias else None)

    def attention(self, layer, x, cos, sin, slots, mask, keys, values):
        c = self.config
        p = f"model.layers.{layer}.self_attn."
        b, q, _ = x.shape
        shape = (b, q, -1, c["head_dim"])
        query = self.linear(x, p + "q_proj", c["qkv_bias"]).view(shape).transpose(1, 2)
        key = self.linear(x, p + "k_proj", c["qkv_bias"]).view(shape).transpose(1, 2)
        value = self.linear(x, p + "v_proj", c["qkv_bias"]).view(shape).transpose(1, 2)
        query = query * cos + rotate_half(query) * sin
        key = key * cos + rotate_half(key) * sin
        torch.ops.statickv.cache_write(keys, values, key.contiguous(), value.contiguous(), slots)
        view = mask.size(-1)
        k = keys[:b, :, :view]
        v = values[:b, :, :view]
        out = F.scaled_dot_product_attention(query, k, v, attn_mask=mask, enable_gqa=True)
        out = out.transpose(1, 2).reshape(b, q, -1)
        return self.linear(out, p + "o_proj", c["o_bias"])

    def forward(self, ids, positions, slots, masks, keys, values):
        c = self.config
        x = F.embedding(ids, self.w("model.embed_tokens.weight"))
        freqs = positions.clamp(min=0).unsqueeze(-1).to(torch.float32) * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos().to(x.dtype).unsqueeze(1)  # [b, 1, q, head_dim]
        sin = emb.sin().to(x.dtype).unsqueeze(1)
        for layer, kind in enumerate(c["layer_types"]):
            group = self.present.index(kind)
            p = f"model.layers.{layer}."
            h = rms_norm(x, self.w(p + "input_layernorm.weight"), c["eps"])
            x = x + self.attention(layer, h, cos, sin, slots[group], masks[group], keys[layer],
                                   values[layer])
            h = rms_norm(x, self.w(p + "post_attention_layernorm.weight"), c["eps"])
            gate = self.linear(h, p + "mlp.gate_proj", False)
            up = self.linear(h, p + "mlp.up_proj", False)
            x = x + self.linear(F.silu(gate) * up, p + "mlp.down_proj", False)
        x = rms_norm(x, self.w("model.norm.weight"), c["eps"])
        return F.linear(x, self.w("lm_head.weight"))
