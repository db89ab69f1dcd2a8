"""The torch model set: tiny ``transformers`` models from their config classes (random weights, no
download) and the memory-bound motifs of :mod:`solverfuse.zoo` as ``nn.Module`` s.

:data:`MODELS` maps a name to a builder returning ``(module, example_inputs)``; every model is
small (hidden 32, one or two layers, sequence 8) so exporting and compiling stays quick on a CPU.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

HIDDEN, HEADS, SEQ, VOCAB = 32, 2, 8, 64


def _ids(batch: int = 1, seq: int = SEQ) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(0))


def _image(size: int = 32, channels: int = 3) -> torch.Tensor:
    return torch.randn(1, channels, size, size, generator=torch.Generator().manual_seed(0))


class _Returns0(nn.Module):
    """Wraps a transformers model so that it returns its first output tensor only."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x, return_dict=False)[0]


def _hf(model_cls, config, inputs):
    torch.manual_seed(0)
    m = model_cls(config)
    if hasattr(m.config, "_attn_implementation"):
        m.config._attn_implementation = "sdpa"
    return _Returns0(m).eval(), (inputs,)


def bert():
    from transformers import BertConfig, BertModel
    return _hf(BertModel, BertConfig(hidden_size=HIDDEN, num_hidden_layers=1, num_attention_heads=HEADS,
                                     intermediate_size=2 * HIDDEN, vocab_size=VOCAB,
                                     max_position_embeddings=32), _ids())


def gpt2():
    from transformers import GPT2Config, GPT2Model
    return _hf(GPT2Model, GPT2Config(n_embd=HIDDEN, n_layer=1, n_head=HEADS, vocab_size=VOCAB,
                                     n_positions=32), _ids())


def llama():
    from transformers import LlamaConfig, LlamaModel
    return _hf(LlamaModel, LlamaConfig(hidden_size=HIDDEN, num_hidden_layers=1, num_attention_heads=HEADS,
                                       num_key_value_heads=1, intermediate_size=2 * HIDDEN,
                                       vocab_size=VOCAB, max_position_embeddings=32), _ids())


def t5():
    from transformers import T5Config, T5EncoderModel
    return _hf(T5EncoderModel, T5Config(d_model=HIDDEN, d_kv=HIDDEN // HEADS, d_ff=2 * HIDDEN,
                                        num_layers=1, num_heads=HEADS, vocab_size=VOCAB), _ids())


def distilbert():
    from transformers import DistilBertConfig, DistilBertModel
    return _hf(DistilBertModel, DistilBertConfig(dim=HIDDEN, n_layers=1, n_heads=HEADS, hidden_dim=2 * HIDDEN,
                                                 vocab_size=VOCAB, max_position_embeddings=32), _ids())


def vit():
    from transformers import ViTConfig, ViTModel
    return _hf(ViTModel, ViTConfig(hidden_size=HIDDEN, num_hidden_layers=1, num_attention_heads=HEADS,
                                   intermediate_size=2 * HIDDEN, image_size=32, patch_size=8),
               _image())


def convnext():
    from transformers import ConvNextConfig, ConvNextModel
    return _hf(ConvNextModel, ConvNextConfig(hidden_sizes=[16, 32], depths=[1, 1], num_stages=2,
                                             image_size=32), _image())


def resnet():
    from transformers import ResNetConfig, ResNetModel
    return _hf(ResNetModel, ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                                         layer_type="basic"), _image())


# ---- the memory-bound motifs of solverfuse.zoo, as modules (rows x cols activations)
ROWS, COLS = 64, 128


class ResidualLayerNormGelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(COLS)

    def forward(self, x, r):
        return nn.functional.gelu(self.ln(x + r))


class SoftmaxRows(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


class ElementwiseChain(nn.Module):
    def forward(self, x):
        return torch.tanh(torch.relu(x * 0.5 + 1.0) - 0.25) * 2.0


class Branches(nn.Module):
    def forward(self, x):
        return torch.exp(x) + 1.0, torch.sigmoid(x) * 3.0


class Center(nn.Module):
    def forward(self, x):
        return x - x.mean(dim=-1, keepdim=True)


class MatmulBiasRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(COLS, COLS)

    def forward(self, x):
        return torch.relu(self.lin(x))


def _rows(n: int = 1):
    g = torch.Generator().manual_seed(1)
    return tuple(torch.randn(ROWS, COLS, generator=g) for _ in range(n))


def _motif(cls, n_inputs: int = 1):
    def build():
        torch.manual_seed(0)
        return cls().eval(), _rows(n_inputs)
    return build


#: Every model of the set: name -> builder of (module in eval mode, example inputs).
MODELS: dict[str, Callable[[], tuple]] = {
    "bert": bert, "gpt2": gpt2, "llama": llama, "t5": t5, "distilbert": distilbert, "vit": vit,
    "convnext": convnext, "resnet": resnet,
    "residual_layernorm_gelu": _motif(ResidualLayerNormGelu, 2), "softmax_rows": _motif(SoftmaxRows),
    "elementwise_chain": _motif(ElementwiseChain), "branches": _motif(Branches),
    "center": _motif(Center), "matmul_bias_relu": _motif(MatmulBiasRelu),
}
