"""Tiny random Llama models made by the tests (nothing can be downloaded): a Hugging Face folder
(config, safetensors weights, a byte-level BPE tokenizer.json with a chat template) and the same
network as a GGUF file. Random weights: the engines load and run them, the text is noise."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy, safetensors, tokenizers and gguf are needed only when a model is made
    import numpy as np

HIDDEN = 64
LAYERS = 2
HEADS = 2
FF = 128
CONTEXT = 512
SPECIALS = ("<s>", "</s>", "<|im_start|>", "<|im_end|>")
# ChatML: a template llama-server's chat parser (common/chat.cpp) and mlx-lm know well.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _byte_alphabet() -> list[str]:
    """GPT-2's printable stand-ins for the 256 bytes (what a byte-level BPE vocabulary holds)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    codes, extra = list(keep), 0
    for byte in range(256):
        if byte not in keep:
            keep.append(byte)
            codes.append(256 + extra)
            extra += 1
    return [chr(code) for _byte, code in sorted(zip(keep, codes, strict=True))]


def vocabulary() -> list[str]:
    """The 256 byte tokens, two merged tokens, then the special tokens."""
    return [*_byte_alphabet(), "Ġt", "he", *SPECIALS]


MERGES = ("Ġ t", "h e")


def _weights(
    seed: int, hidden: int = HIDDEN, layers: int = LAYERS, kv_width: int = HIDDEN
) -> dict[str, np.ndarray]:
    """The network in Hugging Face names and layout ((out, in) matrices); ``kv_width`` is the
    K and V projections' output size (kv heads x head size)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    vocab = len(vocabulary())

    def matrix(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)

    # Only printable ASCII (and the end of turn) can win: a random network otherwise emits byte
    # tokens that make no UTF-8, which servers rightly refuse to parse as a chat message.
    head = matrix(vocab, hidden) * 50
    speakable = [i for i, token in enumerate(vocabulary()) if i in range(0x20, 0x7F) or token in ("Ġt", "he")]
    silent = np.setdiff1d(np.arange(vocab), [*speakable, vocabulary().index("<|im_end|>")])
    head[silent] = 0
    weights = {
        "model.embed_tokens.weight": matrix(vocab, hidden),
        "model.norm.weight": np.ones(hidden, np.float32),
        "lm_head.weight": head,
    }
    for layer in range(layers):
        prefix = f"model.layers.{layer}."
        for name in ("q_proj", "o_proj"):
            weights[prefix + f"self_attn.{name}.weight"] = matrix(hidden, hidden)
        for name in ("k_proj", "v_proj"):
            weights[prefix + f"self_attn.{name}.weight"] = matrix(kv_width, hidden)
        weights[prefix + "mlp.gate_proj.weight"] = matrix(FF, hidden)
        weights[prefix + "mlp.up_proj.weight"] = matrix(FF, hidden)
        weights[prefix + "mlp.down_proj.weight"] = matrix(hidden, FF)
        weights[prefix + "input_layernorm.weight"] = np.ones(hidden, np.float32)
        weights[prefix + "post_attention_layernorm.weight"] = np.ones(hidden, np.float32)
    return weights


def hf_model(folder: Path, seed: int = 0, heads: int = HEADS, context: int = CONTEXT) -> Path:
    """A Hugging Face Llama folder: config.json, model.safetensors, tokenizer files. ``heads``
    sets the head size (HIDDEN // heads; the weights' shapes do not change): vLLM's CPU attention
    takes 64, not the default's 32. ``context``: the model's length (max_position_embeddings,
    which vLLM takes as its max_model_len when not given one)."""
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    folder.mkdir(parents=True, exist_ok=True)
    tokens = vocabulary()
    ids = {token: index for index, token in enumerate(tokens)}
    bos, eos = ids["<s>"], ids["<|im_end|>"]
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": FF,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "vocab_size": len(tokens),
        "max_position_embeddings": context,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "torch_dtype": "float32",
    }
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    save_file(_weights(seed), str(folder / "model.safetensors"), metadata={"format": "pt"})
    merges = [tuple(merge.split(" ")) for merge in MERGES]
    tokenizer = Tokenizer(models.BPE(vocab=dict(ids), merges=merges))  # type: ignore[arg-type]
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(list(SPECIALS))
    tokenizer.save(str(folder / "tokenizer.json"))
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "<|im_end|>",
        "chat_template": CHAT_TEMPLATE,
        "model_max_length": context,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=1))
    return folder


#: Hugging Face tensor names -> GGUF's (llama.cpp's llama architecture).
_GGUF_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
}


def _gguf_name(name: str) -> str:
    if name in _GGUF_NAMES:
        return _GGUF_NAMES[name]
    _model, _layers, layer, rest = name.split(".", 3)
    return f"blk.{layer}.{_GGUF_NAMES[rest]}"


def gguf_model(
    path: Path,
    seed: int = 0,
    hidden: int = HIDDEN,
    layers: int = LAYERS,
    heads: int = HEADS,
    kv_heads: int = HEADS,
    context: int = CONTEXT,
) -> Path:
    """The same network as a GGUF file (F32 tensors, GPT-2 style byte-level BPE vocabulary);
    the sizes can be changed (the memory tests want buffers far above the logs' 0.01 MiB, the
    load test long generations)."""
    import gguf

    path.parent.mkdir(parents=True, exist_ok=True)
    tokens = vocabulary()
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("enginespec-tiny")
    writer.add_context_length(context)
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(FF)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(hidden // heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    types = [gguf.TokenType.NORMAL] * (len(tokens) - len(SPECIALS)) + [gguf.TokenType.CONTROL] * len(SPECIALS)
    writer.add_token_types(types)
    writer.add_token_merges(list(MERGES))
    writer.add_bos_token_id(tokens.index("<s>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)
    for name, tensor in _weights(seed, hidden, layers, kv_heads * (hidden // heads)).items():
        writer.add_tensor(_gguf_name(name), tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def broken_gguf(path: Path) -> Path:
    """A file named like a model that no loader accepts."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 64)
    return path
