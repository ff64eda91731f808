"""Published transformer architectures, and a reader for Hugging Face `config.json` files.

The memory model, the cost model and the reference trainer all read a `ModelArch`, so the
three agree on what "llama2-7b" means.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

FAMILIES = ("gpt2", "llama")
# Hugging Face model_type -> family. Memory-wise gemma (GeGLU) and phi3 (fused qkv and gate_up
# projections) are llama-family decoders; mixtral and qwen2_moe are llama-family decoders whose
# MLP is a mixture of experts.
HF_MODEL_TYPES = {"gpt2": "gpt2", "llama": "llama", "mistral": "llama", "qwen2": "llama",
                  "gemma": "llama", "phi3": "llama", "mixtral": "llama", "qwen2_moe": "llama"}


@dataclass(frozen=True)
class ModelArch:
    """A decoder-only transformer.

    gpt2 family: LayerNorm, GELU 4h MLP, learned positions, tied embeddings, biases.
    llama family: RMSNorm, SwiGLU, RoPE, optional tied embeddings, no biases, GQA.
    Mixture of experts (num_experts > 0, llama family): each layer's MLP is num_experts SwiGLU
    experts of width moe_ffn_hidden_size, a router, and optionally one always-on shared expert
    of width shared_expert_ffn_hidden_size (Qwen-MoE); each token runs experts_per_token experts.
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
    attention_head_dim: int = 0  # 0: hidden_size / num_heads (gemma sets its own)
    num_experts: int = 0  # 0: a dense MLP
    experts_per_token: int = 0  # top-k
    moe_ffn_hidden_size: int = 0
    shared_expert_ffn_hidden_size: int = 0  # 0: no shared expert
    qk_norm: bool = False  # RMSNorm over each head's q and k (Qwen3); not in the reference trainer

    @property
    def head_dim(self) -> int:
        return self.attention_head_dim or self.hidden_size // self.num_heads

    @property
    def q_dim(self) -> int:
        """Width of the queries and of the attention output (hidden_size unless head_dim is set)."""
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def active_ffn_size(self) -> int:
        """MLP width one token's activations go through: a dense layer's, or top-k experts' plus
        the shared expert's (what a token saves for backward scales with it)."""
        if not self.is_moe:
            return self.ffn_hidden_size
        return self.experts_per_token * self.moe_ffn_hidden_size + self.shared_expert_ffn_hidden_size

    def expert_layer_params(self) -> int:
        """Parameters of one layer's routed experts (sharded by expert parallelism)."""
        return self.num_experts * 3 * self.hidden_size * self.moe_ffn_hidden_size if self.is_moe else 0

    def layer_params(self) -> int:
        h, f, kv, q = self.hidden_size, self.ffn_hidden_size, self.kv_dim, self.q_dim
        if self.family == "gpt2":
            attention = h * (q + 2 * kv) + (q + 2 * kv) + q * h + h
            mlp = h * f + f + f * h + h
            norms = 4 * h
        else:
            attention = h * (q + 2 * kv) + q * h + (q + 2 * kv if self.qkv_bias else 0)
            mlp = 3 * h * f
            if self.is_moe:
                shared = self.shared_expert_ffn_hidden_size
                mlp = self.expert_layer_params() + h * self.num_experts \
                    + (3 * h * shared + h if shared else 0)  # router; shared expert and its gate
            norms = 2 * h + (2 * self.head_dim if self.qk_norm else 0)
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
        if self.is_moe:
            if self.family != "llama":
                raise ValueError("model.num_experts: mixture of experts needs the llama family")
            if not 0 < self.experts_per_token <= self.num_experts:
                raise ValueError(f"model.experts_per_token must be in 1..{self.num_experts}, "
                                 f"got {self.experts_per_token}")
            if self.moe_ffn_hidden_size <= 0:
                raise ValueError("model.moe_ffn_hidden_size must be positive")


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
    # Mixture of experts (Jiang et al. 2024, Mixtral of Experts; mistralai/Mixtral-8x7B-v0.1).
    ModelArch("mixtral-8x7b", "llama", 4096, 32, 32, 8, 14336, 32000, 32768, False,
              num_experts=8, experts_per_token=2, moe_ffn_hidden_size=14336),
)


def model_catalog() -> dict[str, ModelArch]:
    return {m.name: m for m in _CATALOG}


# Fields each model_type needs in config.json (transformers/models/<type>/configuration_<type>.py
# names them; defaults there that a real checkpoint always overrides are required here).
HF_REQUIRED_FIELDS = {
    "gpt2": ("n_embd", "n_layer", "n_head", "vocab_size", "n_positions"),
    "llama": ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
              "vocab_size"),
    "mixtral": ("num_local_experts", "num_experts_per_tok"),
    "qwen2_moe": ("num_experts", "num_experts_per_tok", "moe_intermediate_size"),
}
# Defaults of the transformers configuration classes, where a config.json may omit the field.
HF_TIED_DEFAULT = {"gemma": True}  # GemmaConfig(tie_word_embeddings=True); others False


def _hf_int(config: dict, field: str) -> int:
    value = config[field]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise ValueError(f"{field}: must be an integer in config.json, got {value!r}")
    return int(value)


def from_hf_config(config: dict, name: str = "custom") -> ModelArch:
    """Map a Hugging Face config.json onto a ModelArch; ValueError names the bad or missing field."""
    model_type = config.get("model_type")
    if model_type not in HF_MODEL_TYPES:
        raise ValueError(
            f"model_type: unsupported {model_type!r}; supported: {', '.join(HF_MODEL_TYPES)}")
    family = HF_MODEL_TYPES[model_type]
    required = HF_REQUIRED_FIELDS[family]
    if model_type != family:  # e.g. mixtral: llama's fields and its own
        required += HF_REQUIRED_FIELDS.get(model_type, ())
    missing = [f for f in required if config.get(f) is None]
    if missing:
        raise ValueError(f"{missing[0]}: missing from config.json (model_type {model_type} "
                         f"needs {', '.join(required)})")
    if family == "gpt2":
        hidden = _hf_int(config, "n_embd")
        arch = ModelArch(
            name, "gpt2", hidden, _hf_int(config, "n_layer"), _hf_int(config, "n_head"),
            _hf_int(config, "n_head"), int(config.get("n_inner") or 4 * hidden),
            _hf_int(config, "vocab_size"), _hf_int(config, "n_positions"), True)
        arch.validate()
        return arch
    heads = _hf_int(config, "num_attention_heads")
    moe = {}
    if model_type == "mixtral":  # MixtralConfig: every layer is sparse, experts of intermediate_size
        moe = dict(num_experts=_hf_int(config, "num_local_experts"),
                   experts_per_token=_hf_int(config, "num_experts_per_tok"),
                   moe_ffn_hidden_size=_hf_int(config, "intermediate_size"))
    elif model_type == "qwen2_moe":  # Qwen2MoeConfig: routed experts plus one shared expert
        moe = dict(num_experts=_hf_int(config, "num_experts"),
                   experts_per_token=_hf_int(config, "num_experts_per_tok"),
                   moe_ffn_hidden_size=_hf_int(config, "moe_intermediate_size"),
                   shared_expert_ffn_hidden_size=int(config.get("shared_expert_intermediate_size")
                                                     or 0))
        if config.get("mlp_only_layers") or int(config.get("decoder_sparse_step") or 1) != 1:
            raise ValueError("decoder_sparse_step: only configs whose every layer is sparse "
                             "(decoder_sparse_step 1, no mlp_only_layers) are supported")
    arch = ModelArch(
        name, "llama", _hf_int(config, "hidden_size"), _hf_int(config, "num_hidden_layers"), heads,
        int(config.get("num_key_value_heads") or heads), _hf_int(config, "intermediate_size"),
        _hf_int(config, "vocab_size"), int(config.get("max_position_embeddings") or 4096),
        bool(config.get("tie_word_embeddings", HF_TIED_DEFAULT.get(model_type, False))),
        qkv_bias=model_type in ("qwen2", "qwen2_moe"),
        attention_head_dim=int(config.get("head_dim") or 0), **moe)
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
