"""Published transformer architectures, and a reader for Hugging Face `config.json` files.

The memory model, the cost model and the reference trainer all read a `ModelArch`, so the
three agree on what "llama2-7b" means.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

FAMILIES = ("gpt2", "llama")
HF_MODEL_TYPES = {"gpt2": "gpt2", "llama": "llama", "mistral": "llama", "qwen2": "llama"}


@dataclass(frozen=True)
class ModelArch:
    """A decoder-only transformer.

    gpt2 family: LayerNorm, GELU 4h MLP, learned positions, tied embeddings, biases.
    llama family: RMSNorm, SwiGLU, RoPE, optional tied embeddings, no biases, GQA.
    """

    name: str
    family: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    ffn_hidden_size: int
    vocab_size: int
    max_position_embeddings: int
    tied_embeddings: bool
    qkv_bias: bool = False  # qwen2 has biases on q, k and v only

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    def layer_params(self) -> int:
        h, f, kv = self.hidden_size, self.ffn_hidden_size, self.kv_dim
        if self.family == "gpt2":
            attention = h * (h + 2 * kv) + (h + 2 * kv) + h * h + h
            mlp = h * f + f + f * h + h
            norms = 4 * h
        else:
            attention = h * (h + 2 * kv) + h * h + (h + 2 * kv if self.qkv_bias else 0)
            mlp = 3 * h * f
            norms = 2 * h
        return attention + mlp + norms

    def embedding_params(self) -> int:
        """Token embedding, plus learned positions for gpt2."""
        positions = self.max_position_embeddings * self.hidden_size if self.family == "gpt2" else 0
        return self.vocab_size * self.hidden_size + positions

    def head_params(self) -> int:
        """Final norm plus an untied output projection."""
        final_norm = 2 * self.hidden_size if self.family == "gpt2" else self.hidden_size
        lm_head = 0 if self.tied_embeddings else self.vocab_size * self.hidden_size
        return final_norm + lm_head

    def num_params(self) -> int:
        return self.embedding_params() + self.num_layers * self.layer_params() + self.head_params()

    def validate(self) -> None:
        """Raise ValueError naming the field of an inconsistent architecture."""
        if self.family not in FAMILIES:
            raise ValueError(f"model.family: unknown family {self.family!r}; known: {FAMILIES}")
        for field in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "ffn_hidden_size",
                      "vocab_size", "max_position_embeddings"):
            if getattr(self, field) <= 0:
                raise ValueError(f"model.{field} must be positive, got {getattr(self, field)}")
        if self.hidden_size % self.num_heads:
            raise ValueError("model.num_heads must divide model.hidden_size")
        if self.num_heads % self.num_kv_heads:
            raise ValueError("model.num_kv_heads must divide model.num_heads")


def _gpt2(name: str, layers: int, hidden: int, heads: int) -> ModelArch:
    return ModelArch(name, "gpt2", hidden, layers, heads, heads, 4 * hidden, 50257, 1024, True)


def _llama(name: str, layers: int, hidden: int, heads: int, kv_heads: int, ffn: int,
           vocab: int, max_pos: int, tied: bool = False) -> ModelArch:
    return ModelArch(name, "llama", hidden, layers, heads, kv_heads, ffn, vocab, max_pos, tied)


_CATALOG: tuple[ModelArch, ...] = (
    # Tiny models for tests and the CPU reference trainer.
    ModelArch("tiny-gpt2", "gpt2", 128, 4, 4, 4, 512, 1024, 256, True),
    _llama("tiny-llama", 4, 128, 4, 2, 344, 1024, 256),
    # Published architectures (Radford et al. 2019; Touvron et al. 2023; Jiang et al. 2023; Meta 2024).
    _gpt2("gpt2", 12, 768, 12),
    _gpt2("gpt2-medium", 24, 1024, 16),
    _gpt2("gpt2-large", 36, 1280, 20),
    _gpt2("gpt2-xl", 48, 1600, 25),
    _llama("llama3.2-1b", 16, 2048, 32, 8, 8192, 128256, 131072, tied=True),
    _llama("tinyllama-1.1b", 22, 2048, 32, 4, 5632, 32000, 2048),
    _llama("llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096),
    _llama("llama2-13b", 40, 5120, 40, 40, 13824, 32000, 4096),
    _llama("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096),
    _llama("mistral-7b", 32, 4096, 32, 8, 14336, 32000, 32768),
    _llama("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192),
    _llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192),
    _llama("llama3.1-405b", 126, 16384, 128, 8, 53248, 128256, 131072),
)


def model_catalog() -> dict[str, ModelArch]:
    return {m.name: m for m in _CATALOG}


def from_hf_config(config: dict, name: str = "custom") -> ModelArch:
    """Map a Hugging Face config.json onto a ModelArch; ValueError names the bad field."""
    model_type = config.get("model_type")
    if model_type not in HF_MODEL_TYPES:
        raise ValueError(
            f"model_type: unsupported {model_type!r}; supported: {', '.join(HF_MODEL_TYPES)}")
    try:
        if model_type == "gpt2":
            hidden = int(config["n_embd"])
            arch = ModelArch(
                name, "gpt2", hidden, int(config["n_layer"]), int(config["n_head"]),
                int(config["n_head"]), int(config.get("n_inner") or 4 * hidden),
                int(config["vocab_size"]), int(config["n_positions"]), True)
        else:
            heads = int(config["num_attention_heads"])
            arch = ModelArch(
                name, "llama", int(config["hidden_size"]), int(config["num_hidden_layers"]), heads,
                int(config.get("num_key_value_heads") or heads), int(config["intermediate_size"]),
                int(config["vocab_size"]), int(config.get("max_position_embeddings", 4096)),
                bool(config.get("tie_word_embeddings", False)), qkv_bias=model_type == "qwen2")
    except KeyError as missing:
        raise ValueError(f"{missing.args[0]}: missing from config.json") from None
    arch.validate()
    return arch


def load_model(ref: str) -> ModelArch:
    """Resolve a catalog name or a path to a config.json; ValueError names the field."""
    catalog = model_catalog()
    if ref in catalog:
        return catalog[ref]
    path = Path(ref)
    if path.suffix == ".json" or path.is_file():
        if not path.is_file():
            raise ValueError(f"model: config file {ref!r} does not exist")
        try:
            config = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise ValueError(f"model: {ref!r} is not valid JSON ({err.msg})") from None
        return from_hf_config(config, name=path.parent.name or path.stem)
    raise ValueError(f"model: unknown model {ref!r}; catalog: {', '.join(catalog)}")
