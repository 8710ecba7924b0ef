"""A short Llama decoder as gpt-fast writes one: fused q/k/v and gate/up
weights, key and value caches preallocated per layer and written with
index_copy_ at the step's positions, attention over the whole cache under a
causal mask row, and a decode step compiled with
torch.compile(mode="reduce-overhead", fullgraph=True). It loads the
safetensors checkpoint hf_compare_parts.common.checkpoint() writes, so
benchmarks/chained_arms.py steps it on the very weights the other arms
step. Llama only (the shapes hf_config names)."""

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding


def rms_norm(x, weight, eps):
    """As transformers computes it: in float32, the weight applied after the cast back."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


class Layer(torch.nn.Module):
    """One decoder layer's weights and its key and value caches, as buffers:
    fixed addresses, which a captured CUDA graph needs and gpt-fast has."""

    def __init__(self, tensors):
        super().__init__()
        for name, tensor in tensors.items():
            self.register_buffer(name, tensor)


class FastLlama(torch.nn.Module):
    def __init__(self, config, directory, dtype, device, batch, max_len):
        super().__init__()
        self.config = config
        state = {}
        for path in sorted(directory.glob("*.safetensors")):
            state.update(load_file(str(path), device=str(device)))
        get = lambda name: state[name].to(dtype)  # noqa: E731
        c = config
        self.heads, self.kv_heads, self.head_dim = (c.num_attention_heads, c.num_key_value_heads,
                                                    c.head_dim)
        self.register_buffer("embed", get("model.embed_tokens.weight"))
        self.register_buffer("lm_head", get("model.embed_tokens.weight" if c.tie_word_embeddings
                                            else "lm_head.weight"))
        self.register_buffer("norm", get("model.norm.weight"))
        cache = lambda: torch.zeros(batch, self.kv_heads, max_len, self.head_dim, dtype=dtype,  # noqa: E731
                                    device=device)
        self.layers = torch.nn.ModuleList()
        for i in range(c.num_hidden_layers):
            p = f"model.layers.{i}."
            self.layers.append(Layer({
                "wqkv": torch.cat([get(p + f"self_attn.{n}_proj.weight") for n in "qkv"]),
                "wo": get(p + "self_attn.o_proj.weight"),
                "w13": torch.cat([get(p + "mlp.gate_proj.weight"), get(p + "mlp.up_proj.weight")]),
                "w2": get(p + "mlp.down_proj.weight"),
                "attn_norm": get(p + "input_layernorm.weight"),
                "ffn_norm": get(p + "post_attention_layernorm.weight"),
                "k": cache(),
                "v": cache(),
            }))  # fmt: skip
        # cos and sin of every position, by transformers' own rotary module.
        rope = LlamaRotaryEmbedding(config=c).to(device)
        positions = torch.arange(max_len, device=device).unsqueeze(0)
        cos, sin = rope(torch.zeros(1, dtype=dtype, device=device), positions)
        self.register_buffer("cos", cos[0].contiguous())  # [max_len, head_dim]
        self.register_buffer("sin", sin[0].contiguous())
        self.register_buffer("causal", torch.ones(max_len, max_len, dtype=torch.bool,
                                                  device=device).tril())

    def forward(self, idx, input_pos):
        """Logits [b, q, vocab] of ids [b, q] at positions input_pos [q]."""
        b, q = idx.shape
        h, kv, d, eps = self.heads, self.kv_heads, self.head_dim, self.config.rms_norm_eps
        x = F.embedding(idx, self.embed)
        cos, sin = self.cos[input_pos], self.sin[input_pos]
        mask = self.causal[input_pos].view(1, 1, q, -1)
        for layer in self.layers:
            qkv = F.linear(rms_norm(x, layer.attn_norm, eps), layer.wqkv)
            qs, ks, vs = qkv.split([h * d, kv * d, kv * d], dim=-1)
            qs = rotate(qs.view(b, q, h, d).transpose(1, 2), cos, sin)
            ks = rotate(ks.view(b, q, kv, d).transpose(1, 2), cos, sin)
            layer.k.index_copy_(2, input_pos, ks)
            layer.v.index_copy_(2, input_pos, vs.view(b, q, kv, d).transpose(1, 2))
            y = F.scaled_dot_product_attention(qs, layer.k, layer.v, attn_mask=mask,
                                               enable_gqa=True)
            x = x + F.linear(y.transpose(1, 2).reshape(b, q, h * d), layer.wo)
            gate, up = F.linear(rms_norm(x, layer.ffn_norm, eps), layer.w13).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, layer.w2)
        return F.linear(rms_norm(x, self.norm, eps), self.lm_head)


def decode_one_token(model, cur, input_pos):
    """gpt-fast's decode step: the forward of one token per row and the
    greedy pick, on the device."""
    logits = model(cur, input_pos)
    return logits[:, -1].argmax(-1, keepdim=True)
