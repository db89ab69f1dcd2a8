"""Export the transformers test set (tiny configs, random weights) with both torch exporters.

A test-data tool: needs torch + transformers (not runtime dependencies of solverfuse). Writes
``tests/data/models/<family>_<exporter>.onnx`` (lightened: big float initializers become
ConstantOfShape, see ``tests/model_set.py``) and ``<name>.inputs.npz`` with example inputs.
``dynamo`` = ``torch.onnx.export(dynamo=True)`` at opset 18, ``ts`` = the TorchScript exporter at
opset 17. Run: ``python tests/data/export_models.py [family ...]``.
"""
from __future__ import annotations

import io
import sys
import traceback
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.model_set import MODELS_DIR, lighten  # noqa: E402

SEQ = 8


def _text(vocab=96):
    rng = np.random.default_rng(0)
    return {"input_ids": rng.integers(0, vocab, (1, SEQ)).astype(np.int64)}


def _text_mask(vocab=96):
    """Decoders get an explicit all-ones attention mask (without it transformers' packed-sequence
    check uses aten::diff, which the TorchScript exporter cannot export)."""
    return {**_text(vocab), "attention_mask": np.ones((1, SEQ), np.int64)}


def families():
    import transformers as T
    small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                 vocab_size=96, max_position_embeddings=32)
    out = {
        "bert": lambda: (T.BertModel(T.BertConfig(**small)), _text()),
        "roberta": lambda: (T.RobertaModel(T.RobertaConfig(**{**small, "max_position_embeddings": 40})), _text()),
        "distilbert": lambda: (T.DistilBertModel(T.DistilBertConfig(
            vocab_size=96, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=32)), _text()),
        "gpt2": lambda: (T.GPT2Model(T.GPT2Config(vocab_size=96, n_positions=32, n_embd=32, n_layer=2,
                                                   n_head=4, use_cache=False)), _text_mask()),
        "llama": lambda: (T.LlamaModel(T.LlamaConfig(**small, num_key_value_heads=2, use_cache=False)), _text_mask()),
        "mistral": lambda: (T.MistralModel(T.MistralConfig(**small, num_key_value_heads=2, use_cache=False,
                                                           sliding_window=None)), _text_mask()),
        "t5": lambda: (T.T5Model(T.T5Config(vocab_size=96, d_model=32, d_kv=8, d_ff=64, num_layers=1,
                                             num_decoder_layers=1, num_heads=4, use_cache=False,
                                             relative_attention_num_buckets=8)),
                       {**_text(), "decoder_input_ids": _text()["input_ids"][:, :4]}),
        "bart": lambda: (T.BartModel(T.BartConfig(vocab_size=96, d_model=32, encoder_layers=1, decoder_layers=1,
                                                  encoder_attention_heads=4, decoder_attention_heads=4,
                                                  encoder_ffn_dim=64, decoder_ffn_dim=64,
                                                  max_position_embeddings=32, use_cache=False)),
                         {**_text(), "decoder_input_ids": _text()["input_ids"][:, :4]}),
        "whisper": lambda: (T.WhisperModel(T.WhisperConfig(vocab_size=96, num_mel_bins=16, d_model=32,
                                                           encoder_layers=1, decoder_layers=1,
                                                           encoder_attention_heads=4, decoder_attention_heads=4,
                                                           encoder_ffn_dim=64, decoder_ffn_dim=64,
                                                           max_source_positions=16, max_target_positions=16, pad_token_id=0,
                                                           bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
                                                           use_cache=False)),
                            {"input_features": np.random.default_rng(0).standard_normal((1, 16, 32)).astype(np.float32),
                             "decoder_input_ids": _text()["input_ids"][:, :4],
                             "decoder_attention_mask": np.ones((1, 4), np.int64)}),
        "vit": lambda: (T.ViTModel(T.ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                               num_attention_heads=4, intermediate_size=64)), _image(32)),
        "clip_vision": lambda: (T.CLIPVisionModel(T.CLIPVisionConfig(image_size=32, patch_size=8, hidden_size=32,
                                                                     num_hidden_layers=2, num_attention_heads=4,
                                                                     intermediate_size=64)), _image(32)),
        "convnext": lambda: (T.ConvNextModel(T.ConvNextConfig(num_channels=3, hidden_sizes=[16, 32], depths=[1, 1],
                                                              num_stages=2, image_size=32)), _image(32)),
        "resnet": lambda: (T.ResNetModel(T.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                                                        layer_type="basic")), _image(32)),
        "mobilenet_v2": lambda: (T.MobileNetV2Model(T.MobileNetV2Config(image_size=32, depth_multiplier=0.25)), _image(32)),
        "efficientnet": lambda: (T.EfficientNetModel(T.EfficientNetConfig(image_size=32, width_coefficient=0.25,
                                                                          depth_coefficient=0.2, hidden_dim=320)), _image(32)),
    }
    return out


def _image(size):
    return {"pixel_values": np.random.default_rng(0).standard_normal((1, 3, size, size)).astype(np.float32)}


class _First:
    """Wrap a model so it returns its first output (last hidden state) as a plain tensor."""

    def __new__(cls, model, names):
        import torch

        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = model

            def forward(self, *args):
                out = self.m(**dict(zip(names, args)), return_dict=False)
                return out[0]
        return M()


def export(family: str, make, exporter: str) -> Path:
    import onnx
    import torch
    torch.manual_seed(0)
    model, inputs = make()
    model.eval()
    names = list(inputs)
    wrapped = _First(model, names)
    args = tuple(torch.from_numpy(inputs[k]) for k in names)
    buf = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            prog = torch.onnx.export(wrapped, args, input_names=names, output_names=["last_hidden_state"],
                                     dynamo=True, opset_version=18, external_data=False)
            proto = prog.model_proto
        else:
            torch.onnx.export(wrapped, args, buf, input_names=names, output_names=["last_hidden_state"],
                              dynamo=False, opset_version=17)
            proto = onnx.load_from_string(buf.getvalue())
    name = f"{family}_{exporter}"
    proto.graph.name = name
    light = lighten(proto)
    onnx.save(light, str(MODELS_DIR / f"{name}.onnx"))
    np.savez(MODELS_DIR / f"{name}.inputs.npz", **{k: v for k, v in inputs.items()})
    return MODELS_DIR / f"{name}.onnx"


def main(argv):
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    fams = families()
    chosen = argv or list(fams)
    for fam in chosen:
        for exporter in ("ts", "dynamo"):
            try:
                p = export(fam, fams[fam], exporter)
                print(f"ok   {p.name} {p.stat().st_size} bytes", flush=True)
            except Exception as e:  # noqa: BLE001 -- report and go on with the next model
                print(f"FAIL {fam}_{exporter}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                      flush=True)
                traceback.print_exc(limit=3, file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
