"""A small decoder-only transformer with fixed random weights (CPU, fp32).

Pre-norm blocks (causal multi-head attention, then an MLP), learned absolute position
embeddings. `forward` computes only the tokens it is given, at positions start..start+n-1,
attending to the K/V of every earlier position passed in `past`: that is what lets the
engine skip a cached prefix. The weights come from a seeded generator, so every process
that builds TinyDecoder(seed=s) has the same model.
"""

import math

import torch
import torch.nn.functional as F


class TinyDecoder:
    def __init__(self, vocab=512, d_model=64, heads=4, layers=2, max_positions=8192, seed=0):
        if d_model % heads:
            raise ValueError(f"d_model {d_model} is not a multiple of heads {heads}")
        g = torch.Generator().manual_seed(seed)

        def w(*shape, fan_in):
            return torch.randn(*shape, generator=g) / math.sqrt(fan_in)

        self.vocab, self.d, self.heads, self.layers = vocab, d_model, heads, layers
        self.max_positions = max_positions
        self.embed = w(vocab, d_model, fan_in=1) * 0.5
        self.pos = w(max_positions, d_model, fan_in=1) * 0.1
        self.blocks = []
        for _ in range(layers):
            self.blocks.append({
                "wq": w(d_model, d_model, fan_in=d_model),
                "wk": w(d_model, d_model, fan_in=d_model),
                "wv": w(d_model, d_model, fan_in=d_model),
                "wo": w(d_model, d_model, fan_in=d_model),
                "w1": w(d_model, 4 * d_model, fan_in=d_model),
                "w2": w(4 * d_model, d_model, fan_in=4 * d_model),
            })
        self.unembed = w(d_model, vocab, fan_in=d_model)

    @torch.no_grad()
    def forward(self, tokens, start=0, past=None):
        """Logits [n, vocab] of `tokens` (n of them) at positions start.., and their K/V.

        past: None, or per layer a pair (K, V) of [start, d_model] tensors (the K/V of
        positions 0..start-1). Returns (logits, [(K_new, V_new) per layer]), each new
        tensor [n, d_model].
        """
        n = len(tokens)
        if start + n > self.max_positions:
            raise ValueError(f"{start + n} positions; the model has {self.max_positions}")
        t = torch.as_tensor(tokens, dtype=torch.long)
        x = self.embed[t] + self.pos[start:start + n]
        h, dh = self.heads, self.d // self.heads
        # New position i (absolute start + i) sees every position <= start + i.
        total = start + n
        mask = torch.arange(total)[None, :] > (start + torch.arange(n))[:, None]
        new_kv = []
        for layer, p in enumerate(self.blocks):
            a = F.layer_norm(x, (self.d,))
            q, k, v = a @ p["wq"], a @ p["wk"], a @ p["wv"]
            new_kv.append((k, v))
            if past is not None and start > 0:
                k = torch.cat([past[layer][0], k])
                v = torch.cat([past[layer][1], v])
            qh = q.view(n, h, dh).transpose(0, 1)          # [h, n, dh]
            kh = k.view(total, h, dh).transpose(0, 1)      # [h, total, dh]
            vh = v.view(total, h, dh).transpose(0, 1)
            scores = (qh @ kh.transpose(1, 2)) / math.sqrt(dh)
            scores = scores.masked_fill(mask, float("-inf"))
            att = torch.softmax(scores, dim=-1) @ vh       # [h, n, dh]
            x = x + att.transpose(0, 1).reshape(n, self.d) @ p["wo"]
            m = F.layer_norm(x, (self.d,))
            x = x + F.gelu(m @ p["w1"]) @ p["w2"]
        logits = F.layer_norm(x, (self.d,)) @ self.unembed
        return logits, new_kv
