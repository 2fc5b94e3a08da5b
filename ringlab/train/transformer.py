"""A transformer described by its shape: parameters, FLOPs and activation bytes per token, for planning a run.

Nothing here needs torch: the shape alone says how much a model weighs, how much arithmetic a token costs and
how much a layer keeps for the backward pass. ``rl.plan`` (:mod:`ringlab.train.planner`) prices a training step
from it.

- **Parameters.** Attention: the query and output projections ``h x h`` each, keys and values ``h x kv x d``
  each (``d = h / heads``; grouped-query attention when ``kv_heads < heads``), or DeepSeek's multi-head latent
  attention (``mla``). Feed-forward: ``3 h f`` gated (SwiGLU: gate, up, down), ``2 h f`` otherwise, once per
  expert, plus a router ``h x experts``. Two norms a layer, a final one, the embedding and the output head
  (one matrix when ``tied``).
- **FLOPs per token** (:meth:`Transformer.flops_per_token`), PaLM's convention (Chowdhery et al. 2022, appendix
  B), which torchtitan and most MFU figures use: ``6 N`` for the matrix multiplications of the ``N`` active
  parameters (2 forward, 4 backward; the embedding lookup is not a multiplication) plus ``12 L h s`` for the
  attention scores and their weighted sum at sequence length ``s``, the causal mask not subtracted.
- **Activation bytes per token** (:meth:`Transformer.activation_bytes_per_token`): what one layer keeps for the
  backward pass, counted tensor by tensor as Korthikanti et al. 2022 (arXiv 2205.05198, section 4.1) count it
  (their 34 bytes x h for GPT-3's layer, 5 a s / h more for the attention matrix), for today's layer: 16-bit
  activations, FlashAttention (the score matrix is never stored), no dropout, and a gated feed-forward.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

ACT_BYTES = 2  # bytes of a 16-bit activation (bf16 or fp16)
FP8_BYTES = 1  # bytes of an fp8 element: what Transformer Engine saves of a GEMM input it quantised (below)


def _count(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    return value


@dataclass(frozen=True)
class Transformer:
    """A decoder-only transformer by its shape (``rl.train.Transformer``).

    ``layers``, ``hidden`` (the model width h), ``heads`` (query heads), ``ffn`` (the feed-forward width; of one
    expert in a mixture of experts), ``vocab``; ``kv_heads`` (grouped-query attention; default: as many as
    ``heads``), ``gated`` (SwiGLU's three matrices, as Llama; False: two, as GPT-3), ``experts`` and ``top_k``
    (a mixture of experts: each token goes to ``top_k`` of ``experts``).

    Beyond these, for the shapes of real models: ``tied`` (the output head is the embedding), ``shared_experts``
    (experts every token goes through, as DeepSeek's), ``dense_layers`` and ``dense_ffn`` (the first layers plain
    feed-forward of that width, as DeepSeek-V3's first 3), ``mla`` (DeepSeek's multi-head latent attention as
    ``(q_rank, kv_rank, nope_dim, rope_dim, v_dim)``), ``name``.

    >>> llama = Transformer.preset("llama3-8b")
    >>> round(llama.params / 1e9, 2)
    8.03
    """

    layers: int
    hidden: int
    heads: int
    ffn: int
    vocab: int
    kv_heads: int | None = None
    gated: bool = True
    experts: int = 1
    top_k: int = 1
    tied: bool = False
    shared_experts: int = 0
    dense_layers: int = 0
    dense_ffn: int | None = None
    mla: tuple | None = None
    name: str = field(default="", compare=False)

    def __post_init__(self):
        for key in ("layers", "hidden", "heads", "ffn", "vocab", "experts", "top_k"):
            _count(key, getattr(self, key))
        _count("shared_experts", self.shared_experts, 0)
        _count("dense_layers", self.dense_layers, 0)
        if self.kv_heads is not None:
            _count("kv_heads", self.kv_heads)
            if self.heads % self.kv_heads:
                raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if self.hidden % self.heads and self.mla is None:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        if self.top_k > self.experts:
            raise ValueError(f"top_k ({self.top_k}) cannot exceed experts ({self.experts})")
        if self.dense_layers > self.layers:
            raise ValueError(f"dense_layers ({self.dense_layers}) cannot exceed layers ({self.layers})")
        if self.dense_ffn is not None:
            _count("dense_ffn", self.dense_ffn)
        if self.mla is not None and (len(self.mla) != 5 or not all(isinstance(v, int) and v > 0 for v in self.mla)):
            raise ValueError(f"mla must be (q_rank, kv_rank, nope_dim, rope_dim, v_dim), whole numbers > 0, "
                             f"got {self.mla!r}")

    # -- shape ---------------------------------------------------------------------------------------
    @classmethod
    def preset(cls, name: str) -> "Transformer":
        """A named open model's shape (:data:`PRESETS`), e.g. ``"llama3-70b"``, ``"gpt3-175b"``, ``"mixtral-8x7b"``."""
        key = name.lower().replace("_", "-").replace(" ", "-")
        if key not in PRESETS:
            raise ValueError(f"unknown model {name!r}; known: {', '.join(PRESETS)}")
        return PRESETS[key]

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv(self) -> int:
        """Key/value heads (as many as query heads unless grouped)."""
        return self.kv_heads or self.heads

    @property
    def moe(self) -> bool:
        return self.experts > 1

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.moe else 0

    def attention_params(self) -> int:
        """Weights of one layer's attention (projections; no biases)."""
        h = self.hidden
        if self.mla:
            q_rank, kv_rank, nope, rope, v = self.mla
            return (h * q_rank + q_rank * self.heads * (nope + rope) + h * (kv_rank + rope)
                    + kv_rank * self.heads * (nope + v) + self.heads * v * h)
        return 2 * h * h + 2 * h * self.kv * self.head_dim

    def mlp_params(self, width: int | None = None) -> int:
        """Weights of one feed-forward block (one expert) of ``width`` (default ``ffn``)."""
        return (3 if self.gated else 2) * self.hidden * (width or self.ffn)

    def layer_params(self, moe: bool) -> tuple[int, int]:
        """(dense weights, expert weights) of one layer: attention, norms and router are dense."""
        dense = self.attention_params() + 2 * self.hidden
        if not moe:
            return dense + self.mlp_params(self.dense_ffn if self.moe else None), 0
        return dense + self.hidden * self.experts + self.shared_experts * self.mlp_params(), \
            self.experts * self.mlp_params()

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def head_params(self) -> int:
        """The output head's weights (0 when tied to the embedding)."""
        return 0 if self.tied else self.vocab * self.hidden

    @property
    def params(self) -> int:
        """Every weight."""
        dense_layer, _ = self.layer_params(False)
        moe_dense, moe_experts = self.layer_params(True)
        return ((self.layers - self.moe_layers) * dense_layer + self.moe_layers * (moe_dense + moe_experts)
                + self.hidden + self.embedding_params + self.head_params)

    @property
    def expert_params(self) -> int:
        """Weights that belong to routed experts (sharded by expert parallelism)."""
        return self.moe_layers * self.layer_params(True)[1]

    @property
    def active_params(self) -> int:
        """Weights one token passes through (``top_k`` of the routed experts), embedding included."""
        routed = self.moe_layers * self.top_k * self.mlp_params()
        return self.params - self.expert_params + routed

    def matmul_params(self) -> int:
        """Active weights a token multiplies by: all but the embedding lookup and the norms (the output head
        counts, tied or not)."""
        norms = (2 * self.layers + 1) * self.hidden
        return self.active_params - self.embedding_params - norms + (self.embedding_params if self.tied else 0)

    # -- arithmetic ----------------------------------------------------------------------------------
    def attention_flops_per_token(self, seq: int) -> float:
        """Forward FLOPs of the scores and the weighted sum, all layers, causal mask not subtracted: ``4 L s d_qk``
        summed over heads (``4 L h s`` for plain attention)."""
        if self.mla:
            _, _, nope, rope, v = self.mla
            return 2.0 * self.layers * seq * self.heads * (nope + rope + v)
        return 4.0 * self.layers * seq * self.hidden

    def flops_per_token(self, seq: int) -> float:
        """Model FLOPs of one token, forward and backward (PaLM's convention: ``6 N + 12 L h s``)."""
        _count("seq", seq)
        return 6.0 * self.matmul_params() + 3 * self.attention_flops_per_token(seq)

    # -- memory --------------------------------------------------------------------------------------
    def activation_bytes_per_token(self, moe: bool | None = None, fp8: bool = False) -> float:
        """Bytes one layer keeps per token for its backward pass (16-bit, FlashAttention, no dropout), before any
        split. Tensor by tensor: the two norms' inputs (2h each); attention's input, queries, keys and values,
        and its output (2h + 2h + 4h kv/heads + 2h); the feed-forward's input (2h), then per expert a token
        visits: up and gate outputs and their product, ``6f`` (gated), or the input and output of the
        activation, ``4f``. For GPT-3's layer that is 32h: Korthikanti et al.'s 34h less their two dropout masks.

        ``fp8``: as Transformer Engine keeps them in fp8 training, each GEMM input it quantises is saved in fp8
        (1 byte) instead: the two normed inputs (LayerNormLinear saves its quantised ``ln_out``,
        transformer_engine/pytorch/module/layernorm_linear.py at d0067d0d, lines 299, 316 and 469) and the
        second feed-forward GEMM's input (Linear saves its quantised input, module/linear.py lines 619-621);
        the attention projection's input is saved once more in fp8 beside the attention kernel's 16-bit output.
        Net ``h + f`` bytes fewer a token (dense). Multi-head latent attention's own GEMM inputs are left 16-bit."""
        h, a = self.hidden, ACT_BYTES
        q = FP8_BYTES if fp8 else a  # a GEMM input Transformer Engine quantises before saving it
        if self.mla:
            _, kv_rank, nope, rope, v = self.mla
            # input; the query's down-projection and its up-projected heads; the compressed keys and values; the
            # up-projected keys and values of every head; the output
            attention = a * (h + q_rank_of(self.mla) + self.heads * (nope + rope) + kv_rank + rope
                             + self.heads * (nope + rope + v) + self.heads * v)
        else:  # input, queries, keys, values, output (Korthikanti et al.'s 11 s b h less the dropout mask's 1)
            attention = q * h + a * (h + 2 * self.kv * self.head_dim + h) + (FP8_BYTES * h if fp8 else 0)
        norms = 2 * a * h
        width = self.ffn if (moe if moe is not None else self.moe) else (self.dense_ffn or self.ffn)
        per_expert = (a * (2 if self.gated else 1) + q) * width  # the last is the second GEMM's input
        visits = (self.top_k + self.shared_experts) if (moe if moe is not None else self.moe) else 1
        return norms + attention + q * h + visits * per_expert

    def describe(self) -> str:
        kind = f", {self.experts} experts (top {self.top_k})" if self.moe else ""
        return (f"{self.name or 'transformer'}: {self.params / 1e9:.1f}B parameters"
                f"{f' ({self.active_params / 1e9:.1f}B active)' if self.moe else ''}, {self.layers} layers, "
                f"hidden {self.hidden}, {self.heads} heads ({self.kv} kv), ffn {self.ffn}{kind}, vocab {self.vocab}")

    def __repr__(self) -> str:
        return f"Transformer({self.describe()})"

    def renamed(self, name: str) -> "Transformer":
        return replace(self, name=name)


def q_rank_of(mla: tuple) -> int:
    return mla[0]


def _preset(name, *args, **kwargs) -> Transformer:
    return Transformer(*args, **kwargs, name=name)


# Shapes from each model's own paper or released config (Brown et al. 2020 table 2.1; Touvron et al. 2023; Llama 3
# paper arXiv 2407.21783 table 3; Mistral's config.json; DeepSeek-V3 technical report arXiv 2412.19437 section 4.2)
PRESETS: dict[str, Transformer] = {p.name: p for p in (
    _preset("gpt3-125m", 12, 768, 12, 3072, 50257, gated=False, tied=True),
    _preset("gpt3-350m", 24, 1024, 16, 4096, 50257, gated=False, tied=True),
    _preset("gpt3-1.3b", 24, 2048, 16, 8192, 50257, gated=False, tied=True),
    _preset("gpt3-2.7b", 32, 2560, 32, 10240, 50257, gated=False, tied=True),
    _preset("gpt3-6.7b", 32, 4096, 32, 16384, 50257, gated=False, tied=True),
    _preset("gpt3-175b", 96, 12288, 96, 49152, 50257, gated=False, tied=True),
    _preset("llama2-7b", 32, 4096, 32, 11008, 32000),
    _preset("llama2-13b", 40, 5120, 40, 13824, 32000),
    _preset("llama2-70b", 80, 8192, 64, 28672, 32000, kv_heads=8),
    _preset("llama3-8b", 32, 4096, 32, 14336, 128256, kv_heads=8),
    _preset("llama3-70b", 80, 8192, 64, 28672, 128256, kv_heads=8),
    _preset("llama3.1-405b", 126, 16384, 128, 53248, 128256, kv_heads=8),
    _preset("mixtral-8x7b", 32, 4096, 32, 14336, 32000, kv_heads=8, experts=8, top_k=2),
    _preset("mixtral-8x22b", 56, 6144, 48, 16384, 32768, kv_heads=8, experts=8, top_k=2),
    _preset("deepseek-v3", 61, 7168, 128, 2048, 129280, experts=256, top_k=8, shared_experts=1, dense_layers=3,
            dense_ffn=18432, mla=(1536, 512, 128, 64, 128)),
)}
PRESETS["llama3.1-8b"] = PRESETS["llama3-8b"].renamed("llama3.1-8b")
PRESETS["llama3.1-70b"] = PRESETS["llama3-70b"].renamed("llama3.1-70b")
PRESETS["llama3-405b"] = PRESETS["llama3.1-405b"]
