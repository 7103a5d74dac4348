"""The EAGLE-3 draft: config keys, tensor table and graph, in the form openvino-genai's EAGLE-3 surgery takes.

One Llama decoder layer fed with three target hidden states (EAGLE-3, arXiv 2503.01840; SafeAILab/EAGLE
eagle/model/cnets.py, sgl-project/SpecForge specforge/modeling/draft/llama3_eagle.py). B batch, S new tokens, T = P + S
with P in the KV state, H the draft's (= the target's) hidden size, nH/nKV heads, D head_dim, Vd the draft vocabulary.

    e      = embed_tokens(input_ids)                              [B, S, H]  a placeholder table genai replaces
             (a VLM draft: e = inputs_embeds, the target's embeddings genai feeds it; RoPE is mrope over
              position_ids [3, B, S], rope.py)
    h      = fc(hidden_states)                                    [B, S, 3H] -> [B, S, H]   (the first MatMul on it)
    x      = concat(input_layernorm(e), hidden_norm(h))           [B, S, 2H] embeddings first
    q,k,v  = x Wq^T, x Wk^T, x Wv^T; RoPE; K/V appended to the state; causal GQA over T
    r1     = h + o_proj(attn)                                     (hidden_norm(h) + ... with norm_before_residual)
    r2     = r1 + down(silu(gate(n)) * up(n)),  n = post_attention_layernorm(r1)
    logits = lm_head(norm(r2))                                    [B, S, Vd]
    d2t    = the draft-to-target offsets, an i64 Constant fed to a Result (target id = d + d2t[d])

Norms are LlamaRMSNorm: x * rsqrt(mean(x^2) + eps) * w. genai 2026.4.1 at load (eagle3_model_transforms.cpp):
replaces the data of the draft's embedding Gather (named embed_tokens) with the target's table, moves fc into the
target (so the draft's `hidden_states` is then H wide), adds `r2` (the Add named midlayer whose input 1 is a
MatMul(Multiply): the MLP residual) as the output it feeds back, and takes d2t out as the sampler's map.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from irsurgeon.core.config import (MAX_HEADS, MAX_VOCAB, MAX_WIDTH, MISSING, ROPE_THETA, Key, Range, brief, flag,
                                   ints, lookup, read_keys)
from irsurgeon.core.errors import CheckpointError, ConfigError
from irsurgeon.draft.recipe import Recipe, Weights
from irsurgeon.families.eagle3 import layout, rope
from irsurgeon.ops import apply_rope, expand_kv, kv_cache, linear, rms_norm, sdpa, swiglu
from irsurgeon.ops.attention import attention_mask_bias, heads, to_bnsd
from irsurgeon.ops.core import const, named
from irsurgeon.weights.table import Table, Tensor, Whole

EAGLE3_MODE = "eagle3_mode"  # rt_info genai reads (optimum-intel 2.2.0 convert.py writes "True")
HIDDEN_LAYERS = "hidden_layers_list"  # rt_info: the target layers whose outputs genai taps (apply_eagle3_rt_info)
TITLE = "EAGLE-3 draft"  # the family named in a refusal (EAGLE3.title)
INPUTS = ("input_ids", "attention_mask", "position_ids", "hidden_states", "beam_idx")
VLM_INPUTS = ("inputs_embeds", *INPUTS[1:])  # optimum-intel 2.2.0's VLM EAGLE-3 draft (model_configs.py eagle3_vlm)
# AngelSlim compressor/speculative/train: modal_type "VLM" (trainer_factory's online VLM trainer) with the target
# types its VLMTransformersBackend.SUPPORT_MODEL_TYPE loads, less hunyuan_vl (genai 2026.4.1 vlm_config.cpp has no
# such VLMModelType)
VLM, VLM_TARGETS = "VLM", ("qwen3_vl", "qwen2_5_vl")
LOGITS, D2T = "logits", "d2t"
LAYER = "midlayer."  # every layer node's name: genai finds the fed-back residual by it, whatever the checkpoint says
LAYOUTS = {"midlayer": "midlayer.", "speculators": "layers.0."}  # stored layer prefix, by layout
EMBED = "model.embed_tokens"  # the Gather genai's share_vocabulary finds by name (the table is tiny: any size works)
I64 = np.int64
KEY_STATE = "past_key_values.0.keypresent.0.key"  # optimum-intel 2.2.0's names, as MakeStateful makes them
VALUE_STATE = "past_key_values.0.valuepresent.0.value"


# ---- config ----

@dataclass(frozen=True)
class Taps:
    """Which target layers the trainer fed the draft, in genai's counting (the output of layer i), and why."""
    ids: tuple[int, ...] | None  # explicit, converted; None: the layout's trainer default, resolved against the target
    said: str                    # one line: where they come from


@dataclass(frozen=True)
class Eagle3Config:
    architecture: str
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope: rope.Rope
    max_position_embeddings: int
    vocab_size: int
    draft_vocab_size: int
    target_hidden_size: int
    norm_before_residual: bool
    taps: Taps
    target_model_type: str | None = None  # set for a VLM draft (modal_type "VLM"): the target it was trained on
    qk_norm: bool = False  # speculators' Qwen3 draft layer: q_norm / k_norm per head before RoPE
    model_type: str = "llama"
    dtype: str | None = None
    source: str = field(default="", compare=False)
    warnings: tuple[str, ...] = field(default=(), compare=False)

    @property
    def kv_groups(self) -> int:
        return self.num_heads // self.num_kv_heads

    @property
    def recipe(self) -> Recipe:
        return RECIPE

    @property
    def vlm(self) -> bool:
        return self.target_model_type is not None


# transformers 5.2.0 models/llama/configuration_llama.py LlamaConfig.__init__ defaults; {layer} is the speculators'
# nested transformer_layer_config (speculators src/speculators/models/eagle3/config.py), else the top level.
KEYS: tuple[Key, ...] = (
    Key("hidden_size", ("{layer}hidden_size",), bounds=ints(MAX_WIDTH)),
    Key("num_heads", ("{layer}num_attention_heads",), 32, bounds=ints(MAX_HEADS)),
    Key("num_kv_heads", ("{layer}num_key_value_heads",), None, bounds=ints(MAX_HEADS), null_is_absent=True),
    Key("head_dim", ("{layer}head_dim",), {"llama": None, "qwen3": 128}, bounds=ints(MAX_WIDTH),
        null_is_absent=True),  # llama None: H // nH; Qwen3Config's head_dim=128
    Key("intermediate_size", ("{layer}intermediate_size",), 11008, bounds=ints(MAX_WIDTH * 8)),
    Key("rms_norm_eps", ("{layer}rms_norm_eps",), 1e-6, float, Range(0, 1, lo_open=True, hi_open=True)),
    Key("hidden_act", ("{layer}hidden_act",), "silu", str, allowed=("silu",)),
    Key("attention_bias", ("{layer}attention_bias",), False, bool, allowed=(False,)),  # cnets.py: bias=False
    Key("mlp_bias", ("{layer}mlp_bias",), False, bool, allowed=(False,)),
    Key("max_position_embeddings", ("{layer}max_position_embeddings",), 2048, bounds=ints(1 << 24)),
    Key("vocab_size", ("{layer}vocab_size", "vocab_size"), 32000, bounds=ints(MAX_VOCAB)),
    # cnets.py Model.__init__: draft_vocab_size (the lm_head's rows), target_hidden_size (fc's input is 3x it)
    Key("draft_vocab_size", ("draft_vocab_size",), None, bounds=ints(MAX_VOCAB), null_is_absent=True),
    Key("target_hidden_size", ("target_hidden_size",), None, bounds=ints(MAX_WIDTH), null_is_absent=True),
    Key("rope_theta", ("{layer}rope_theta",), 10000.0, float, ROPE_THETA),
    Key("dtype", ("dtype", "torch_dtype", "{layer}torch_dtype"), None, str, null_is_absent=True),
)
# Variants genai 2026.4.1 cannot run as trained (speculators core.py / SpecForge llama3_eagle.py): each refused by name.
UNSUPPORTED = {
    "norm_before_fc": "an RMSNorm over the 3*H concat before fc, which genai moves into the target as a bare MatMul",
    "fc_norm": "an RMSNorm per target hidden state before fc, which genai moves into the target as a bare MatMul",
    "norm_output": "the normed hidden state fed back, where genai feeds back the pre-norm MLP residual",
}


def parse_config(cfg: dict, source: str = "config.json") -> Eagle3Config:
    """The draft's configuration as its trainer reads config.json, validated."""
    arch = layout.architecture(cfg)
    if arch is None:
        raise ConfigError(f"{source}: architectures {cfg.get('architectures')!r:.80} name no EAGLE-3 draft "
                          f"(expected one of {', '.join(layout.ARCHITECTURES)})")
    nested = arch == layout.SPECULATORS
    if "eagle_config" in cfg and not isinstance(cfg["eagle_config"], (dict, type(None))):
        raise ConfigError(f"{source}: eagle_config must be a JSON object, found {brief(cfg['eagle_config'], 40)}")
    section = cfg.get("transformer_layer_config") if nested else cfg
    if not isinstance(section, dict):
        raise ConfigError(f"{source}: transformer_layer_config must be a JSON object (the speculators' layer config)")
    layer_type, warnings = layer_type_of(cfg, section, nested, arch, source)
    if (modelopt := [k for k in MODELOPT_KEYS if lookup(cfg, f"eagle_config.{k}") is not MISSING]):
        raise ConfigError(f"{source}: eagle_config.{modelopt[0]} marks an NVIDIA ModelOpt head, whose layer is not "
                          f"stated: ModelOpt's EagleModule norms the hidden branch with hidden_norm(input_layernorm(h)) "
                          f"since bdd10c2 (2025-12-19, modeling_eagle.py) and with hidden_norm(h) before it, and a "
                          f"checkpoint does not say which code trained it")
    for key, why in UNSUPPORTED.items():
        for home, section_ in (("", cfg), ("eagle_config.", cfg.get("eagle_config"))):
            if isinstance(section_, dict) and section_.get(key) is not None and flag(section_, key, False, source,
                                                                                   home):
                raise ConfigError(f"{source}: {home}{key} is set: {why}; openvino-genai 2026.4.1 cannot run this "
                                  f"draft as it was trained")
    layers = section.get("num_hidden_layers", 1)
    if isinstance(layers, bool) or layers != 1 or not isinstance(layers, int):
        raise ConfigError(f"{source}: {'transformer_layer_config.' if nested else ''}num_hidden_layers is "
                          f"{brief(layers, 20)}: only one-layer drafts are built (genai feeds back one layer's "
                          f"residual)")
    v, said = read_keys(cfg, KEYS, layer_type, {"layer": "transformer_layer_config." if nested else ""}, source,
                      family=TITLE)
    warnings += said
    H, nH = v["hidden_size"], v["num_heads"]
    nKV, D = v["num_kv_heads"] or nH, head_dim(v, source)
    if nH % nKV:
        raise ConfigError(f"{source}: num_attention_heads {nH} is not a multiple of num_key_value_heads {nKV}")
    target_h = v["target_hidden_size"] or H
    if target_h != H:
        raise ConfigError(f"{source}: target_hidden_size {target_h} differs from hidden_size {H}: openvino-genai "
                          f"gives the draft the target's [vocab, {target_h}] embedding table")
    draft_vocab = v["draft_vocab_size"] or v["vocab_size"]
    if draft_vocab > v["vocab_size"]:
        raise ConfigError(f"{source}: draft_vocab_size {draft_vocab} exceeds vocab_size {v['vocab_size']}")
    target_type = read_modal(cfg, source)
    if target_type is not None:  # AngelSlim's mrope interleaves its rows, SpecForge's chunks them (rope.py)
        rope_cfg = rope.read_mrope(section, v["rope_theta"], D, source, interleaved=arch != layout.SAFEAILAB)
        if arch == layout.SAFEAILAB:
            warnings.append(f"{source}: a SpecForge {target_type} draft: trained on its own embeddings of the prompt's "
                            f"tokens, where openvino-genai feeds the target's (image features at image positions): "
                            f"the same on text")
    elif arch == layout.ANGELSLIM:
        rope_cfg, said = rope.read_angelslim(section, v["rope_theta"], source)
        warnings += said if rope.BASE_KEY not in cfg else []  # a settled base replaces the trainer's: said below
    else:
        rope_cfg = rope.read(section, v["rope_theta"], v["max_position_embeddings"], source, head_dim=D,
                             trainer=rope.TRANSFORMERS if nested else rope.SPECFORGE)
    rope_cfg, said = rope.settled_base(cfg, rope_cfg, source)
    warnings += said
    taps, said = read_taps(cfg, arch, source)
    warnings += said
    return Eagle3Config(
        architecture=arch, hidden_size=H, num_heads=nH, num_kv_heads=nKV, head_dim=D,
        intermediate_size=v["intermediate_size"], rms_norm_eps=v["rms_norm_eps"], rope=rope_cfg,
        max_position_embeddings=v["max_position_embeddings"], vocab_size=v["vocab_size"],
        draft_vocab_size=draft_vocab, target_hidden_size=target_h,
        norm_before_residual=flag(cfg, "norm_before_residual", False, source), taps=taps,
        target_model_type=target_type, qk_norm=layer_type == "qwen3", dtype=v["dtype"], source=source,
        warnings=tuple(warnings))


# speculators src/speculators/models/eagle3/model_definitions.py model_classes: the draft layer class by
# transformer_layer_config.model_type ("llama": LlamaDecoderEagle3FirstLayer, "qwen3": Qwen3DecoderEagle3FirstLayer,
# the same layer with transformers' Qwen3Attention: q_norm / k_norm, an RMSNorm over head_dim per head, before RoPE)
LAYER_TYPES = ("llama", "qwen3")
# NVIDIA ModelOpt's exported eagle_config (modelopt/torch/export/plugins/hf_spec_configs.py llama_eagle_template_config)
# has these beside use_aux_hidden_state, which SpecForge's configs carry too (configs/qwen3-235B-A22B-eagle3.json)
MODELOPT_KEYS = ("use_input_layernorm_in_first_layer", "use_last_layernorm", "use_mtp_layernorm", "next_layer_regular")
# speculators (PR #684): a draft layer trained attending to a sliding window (layer_types "sliding_attention")
SLIDING = "sliding_attention"


def layer_type_of(cfg: dict, section: dict, nested: bool, arch: str, source: str) -> tuple[str, list[str]]:
    """The draft layer's kind, and a line where a label is not what decides it.

    The speculators choose the layer class by transformer_layer_config.model_type (LAYER_TYPES). SafeAILab, SpecForge
    and AngelSlim build a Llama layer whatever model_type names: SpecForge picks config and model class by
    architectures[0] alone (specforge/training/model_loading.py _draft_config_from_dict, DRAFT_REGISTRY; its Phi-4
    draft says "phi3", its QwQ draft "qwen2"), SafeAILab's cnets.py and AngelSlim's llama_eagle3.py are Llama only."""
    said = []
    if nested:
        kind = section.get("model_type", "llama")
        if kind not in LAYER_TYPES:
            raise ConfigError(f"{source}: transformer_layer_config.model_type {kind!r:.40} is not one of "
                              f"{', '.join(LAYER_TYPES)} (the speculators' draft layers)")
        types = section.get("layer_types")
        if isinstance(types, list) and SLIDING in types:
            said.append(f"{source}: transformer_layer_config.layer_types names {SLIDING} (a window of "
                        f"{section.get('sliding_window')!r:.12} tokens): built attending to the whole context, the "
                        f"same draft as trained while the context fits the window")
        return kind, said
    kind = cfg.get("model_type", "llama")
    if kind != "llama":
        said.append(f"{source}: model_type {kind!r:.40} not read: {arch}'s trainer builds a Llama draft layer "
                    f"whatever it names (the class follows architectures)")
    return "llama", said


def head_dim(v: dict, source: str) -> int:
    """head_dim as given, else hidden_size / num_attention_heads (transformers' LlamaAttention), refused where RoPE
    cannot rotate it (odd: rotate_half splits it in two halves) or where the division leaves a remainder."""
    H, nH, D = v["hidden_size"], v["num_heads"], v["head_dim"]
    if D is None:
        if H % nH:
            raise ConfigError(f"{source}: hidden_size {H} is not a multiple of num_attention_heads {nH}, and no "
                              f"head_dim is given")
        D = H // nH
    if D % 2:
        raise ConfigError(f"{source}: head_dim is {D}: RoPE rotates pairs of dimensions (rotate_half splits it "
                          f"in two halves), so it must be even")
    return D


def read_modal(cfg: dict, source: str) -> str | None:
    """The target model type of an AngelSlim VLM draft (modal_type "VLM"), None for a text draft; refused where
    genai 2026.4.1 cannot run it as trained."""
    modal = cfg.get("modal_type")
    if modal is None and rope.is_specforge_mrope(cfg) and layout.architecture(cfg) == layout.SAFEAILAB:
        modal = VLM  # SpecForge's VLM drafts name their target by target_model_type alone (configs/qwen2-5-vl-*.json)
    if modal in (None, "LLM"):
        if rope.is_mrope(cfg):
            raise ConfigError(f"{source}: rope_scaling names mrope but modal_type is {modal!r}: a text draft with "
                              f"multimodal positions is not built")
        return None
    if modal != VLM:
        raise ConfigError(f"{source}: modal_type {modal!r:.40}: only text and {VLM} EAGLE-3 drafts are built "
                          f"(openvino-genai 2026.4.1 runs EAGLE-3 in LLMPipeline and VLMPipeline)")
    target = cfg.get("target_model_type")
    if target not in VLM_TARGETS:
        raise ConfigError(f"{source}: target_model_type {target!r:.40} of a {VLM} draft is not one of "
                          f"{', '.join(VLM_TARGETS)} (the VLM targets AngelSlim trains on that openvino-genai "
                          f"2026.4.1 runs)")
    if not rope.is_mrope(cfg):
        raise ConfigError(f"{source}: rope_scaling names no mrope in a {VLM} draft: AngelSlim's LlamaRotaryEmbedding "
                          f"indexes its table by 2-D position ids, and openvino-genai 2026.4.1 feeds a {target} "
                          f"draft 3-row mrope position_ids")
    return target


# AngelSlim compressor/speculative/train/trainer/online_eagle3_trainer.py OnlineEagle3Trainer.__init__ (and its VLM
# and audio siblings): getattr(draft_model_config, "aux_hidden_states_layer_ids", None), the draft config.json's
# top-level key (tools/train_eagle3_online.py loads it with DraftModelConfig.from_file as LlamaConfig(**config_dict),
# which keeps the key and save_pretrained writes it back), passed to the target wrapper's backends
ANGELSLIM_TAPS = "aux_hidden_states_layer_ids"
SGLANG_TAPS, VLLM_TAPS = "eagle_config.eagle_aux_hidden_state_layer_ids", "eagle_aux_hidden_state_layer_ids"
TAP_KEYS = {  # key -> what is added to an id to count as genai does (the layer output), in the order read
    ANGELSLIM_TAPS: 0,                                   # AngelSlim's capture: layer outputs
    SGLANG_TAPS: 0,                                      # SGLang's: layer outputs
    VLLM_TAPS: -1,                                       # vLLM's: layer inputs, one layer earlier
}
OWN_TAPS = {layout.ANGELSLIM: ANGELSLIM_TAPS, layout.SAFEAILAB: SGLANG_TAPS, layout.SPECULATORS: VLLM_TAPS}


def read_taps(cfg: dict, arch: str, source: str) -> tuple[Taps, list[str]]:
    """The trainer's tap layers as genai counts them (the output of layer i), from the config where it names them,
    with the warning line of a key the trainer does not read.

    What an id means is the runtime's the trainer captured with:
      - aux_hidden_states_layer_ids (AngelSlim's trainer, read for its layout only: ANGELSLIM_TAPS):
        compressor/speculative/train/models/target/target_model_wrapper.py BaseBackend
        ._extract_auxiliary_hidden_states takes HF hidden_states[id + 1] (index 0 is the embedding output), and its
        vLLM backends (VLLMBackend / VLMVLLMBackend.get_aux_and_target_hiddens) all_hs[id], where _LLMSetupHooksFn
        records each decoder layer's forward output (hidden_states + residual): id k is the output of layer k.
        It comes first for that layout: the eagle_* keys below are not read by AngelSlim's trainer. (Its offline
        path, tools/generate_hidden_for_draft_model.py, calls get_aux_and_target_hiddens without ids: a draft
        trained offline took the default whatever the key says; a checkpoint does not say which path trained it);
      - eagle_config.eagle_aux_hidden_state_layer_ids (SpecForge, trained against SGLang): SGLang
        python/sglang/srt/models/llama.py LlamaModel.set_eagle3_layers_to_capture adds 1 to each id and
        LlamaModel.forward captures hidden_states + residual before layer i: id k is the output of layer k;
      - a top-level eagle_aux_hidden_state_layer_ids (the speculators, trained against vLLM): vLLM
        vllm/model_executor/models/llama.py LlamaModel.forward captures before layer idx, ids as given: id k is the
        input of layer k, the output of layer k - 1.
    Without ids, the layout's trainer default (Taps.ids None), resolved against the target's layer count.
    """
    named = {key: lookup(cfg, key) for key in TAP_KEYS}
    named = {key: ids for key, ids in named.items() if ids not in (MISSING, None)}
    warnings = []
    if ANGELSLIM_TAPS in named and arch != layout.ANGELSLIM:
        warnings.append(f"{source}: {ANGELSLIM_TAPS} not read: it is AngelSlim's key ({layout.ANGELSLIM}), and "
                        f"{arch}'s trainer does not read it")
        del named[ANGELSLIM_TAPS]
    if not named:
        return Taps(None, f"the default of {arch}'s trainer"), warnings
    key = OWN_TAPS[arch] if OWN_TAPS[arch] in named else next(iter(named))
    why = f"the key {arch}'s trainer reads" if key == OWN_TAPS[arch] else "read first"
    for other, other_ids in named.items():
        if other != key and other_ids != named[key]:  # the values as written: each key counts its own way
            warnings.append(f"{source}: {other} {other_ids!r:.60} not read: {key} {named[key]!r:.60} is {why}")
    ids, shift = named[key], TAP_KEYS[key]
    if not isinstance(ids, list) or any(not isinstance(i, int) or isinstance(i, bool) for i in ids):
        raise ConfigError(f"{source}: {key} must be a list of integers, found {ids!r:.80}")
    if len(ids) != 3:
        raise ConfigError(f"{source}: {key} names {len(ids)} layers: openvino-genai 2026.4.1 taps exactly 3 (its fc "
                          f"takes 3 hidden states)")
    converted = tuple(i + shift for i in ids)
    if min(converted) < 0:
        raise ConfigError(f"{source}: {key} {ids} taps the embedding output, which openvino-genai cannot tap (it "
                          f"taps decoder layer outputs)")
    if (twice := repeated(converted)) is not None:
        raise ConfigError(f"{source}: {key} {ids} names layer {twice} twice: {DISTINCT}")
    taps = in_trained_order(converted, arch)
    said = f"{key} {ids}" + (f" -> {list(taps)}" if taps != tuple(ids) else "")
    return Taps(taps, said + (f" ({LAYER_ORDER})" if taps != converted else "")), warnings


# openvino-genai 2026.4.1 concatenates one tapped state per id (eagle3_model_transforms.cpp transform_hidden_state);
# a layer named twice yields fewer states than ids, and the pipeline fails to load ("Number of extracted hidden states
# does not match the requested number")
DISTINCT = "openvino-genai 2026.4.1 taps three distinct layers (a layer named twice fails at load)"
LAYER_ORDER = "in layer order, as the runtime it was trained against captures them"


def repeated(ids: tuple[int, ...]) -> int | None:
    """The first layer named twice, or None."""
    seen: set[int] = set()
    for i in ids:
        if i in seen:
            return i
        seen.add(i)
    return None


def in_trained_order(ids: tuple[int, ...], arch: str) -> tuple[int, ...]:
    """The taps in the order the trainer fed them to the draft, which is the order genai must feed them in (it
    concatenates them in hidden_layers_list's order).

    SGLang (python/sglang/srt/models/llama.py LlamaModel.forward) and vLLM (vllm/model_executor/models/llama.py
    LlamaModel.forward) append a captured state inside their loop over the decoder layers (`if i in
    layers_to_capture`): SpecForge and SafeAILab drafts (trained against SGLang) and speculators drafts (vLLM) were fed
    the states in layer order whatever order their config lists the ids in. AngelSlim's trainer concatenates
    `hidden_states[id + 1] for id in aux_layer_ids` (target_model_wrapper.py BaseBackend
    ._extract_auxiliary_hidden_states): in the list's own order."""
    return ids if arch == layout.ANGELSLIM else tuple(sorted(ids))


def default_taps(arch: str, num_layers: int) -> tuple[int, ...]:
    """The trainer's default taps of an N-layer target, as genai counts them (the output of layer i).

    SafeAILab eagle/model/modeling_llama_kv.py (LlamaModel.forward, layers {2, N//2, N-3}) and vLLM (speculators'
    runtime) capture the inputs of layers [2, N//2, N-3]; SpecForge specforge/algorithms/model_providers.py
    resolve_eagle_capture_layers defaults to [1, N//2 - 1, N - 4]; AngelSlim target_model_wrapper.py
    BaseBackend._get_default_aux_layer_ids returns [1, N//2 - 1, N - 4] (N the target's num_hidden_layers, else
    text_config's), taken as hidden_states[id + 1]: all the outputs of layers [1, N//2 - 1, N - 4]. (AngelSlim's
    first trainer, 917de3a 2025-10-31 until f3cad9f 2025-11-17 and the release/0.2 branch, counted N + 1 hidden
    states: [1, (N+1)//2 - 1, N - 3]; a checkpoint does not say which trained it. genai's own default,
    {2, N/2, N-3} as outputs, is one layer later.)
    """
    return (1, num_layers // 2 - 1, num_layers - 4)


# ---- tensors ----

PREFIX = ""


def tensors(cfg: Eagle3Config) -> Table:
    """Every tensor the draft reads (Llama norms: gains as stored); the layer's rows stored under either layout."""
    H, nH, nKV, D, I = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.intermediate_size
    layer = [("self_attn.q_proj.weight", (nH * D, 2 * H)), ("self_attn.k_proj.weight", (nKV * D, 2 * H)),
             ("self_attn.v_proj.weight", (nKV * D, 2 * H)), ("self_attn.o_proj.weight", (H, nH * D)),
             ("mlp.gate_proj.weight", (I, H)), ("mlp.up_proj.weight", (I, H)), ("mlp.down_proj.weight", (H, I)),
             ("input_layernorm.weight", (H,)), ("hidden_norm.weight", (H,)), ("post_attention_layernorm.weight", (H,))]
    if cfg.qk_norm:
        layer += [("self_attn.q_norm.weight", (D,)), ("self_attn.k_norm.weight", (D,))]
    rows = [Tensor(LAYER + n, shape, layouts={k: Whole(p + n) for k, p in LAYOUTS.items()}) for n, shape in layer]
    rows += [Tensor("fc.weight", (H, 3 * cfg.target_hidden_size)), Tensor("norm.weight", (H,)),
             Tensor("lm_head.weight", (cfg.draft_vocab_size, H))]
    ignored = {"t2d": "the target-to-draft mask: openvino-genai maps draft tokens with d2t only",
               "embed_tokens.weight": "a copy of the target's token embeddings: openvino-genai gives the draft the "
                                      "target's own table at load",
               **{p + "self_attn.rotary_emb.inv_freq": "" for p in LAYOUTS.values()},
               # speculators core.py: the verifier's final norm and head, for training targets only (never saved by
               # its trainer, _keys_to_ignore_on_save; tolerated where a converter kept them)
               "verifier_norm.weight": "the target's final norm, used by the trainer for its targets only",
               "verifier_lm_head.weight": "the target's head, used by the trainer for its targets only"}
    if cfg.draft_vocab_size < cfg.vocab_size:
        rows.append(Tensor(D2T, (cfg.draft_vocab_size,), compress=False, integer=True))
    else:
        ignored[D2T] = "the draft vocabulary is the target's: every offset is 0"
    return Table(PREFIX, tuple(rows), layouts=tuple(LAYOUTS), layouts_of="draft layer tensors", source=cfg.source,
                 ignored=ignored)


def offsets(w: Weights, cfg: Eagle3Config) -> np.ndarray:
    """d2t as stored (zeros for a full vocabulary), checked: every draft token maps into the target's vocabulary."""
    if cfg.draft_vocab_size == cfg.vocab_size:
        return np.zeros(cfg.draft_vocab_size, I64)
    d2t = np.asarray(w.array(D2T), I64)
    mapped = np.arange(d2t.size, dtype=I64) + d2t
    bad = np.flatnonzero((mapped < 0) | (mapped >= cfg.vocab_size))
    if bad.size:
        i = int(bad[0])
        raise CheckpointError(f"{cfg.source}: tensor d2t maps draft token {i} to {int(mapped[i])}, outside the "
                              f"vocabulary of {cfg.vocab_size}")
    return d2t


# ---- graph ----

@dataclass(frozen=True)
class Inputs:
    tokens: ov.Output  # input_ids [B, S], or a VLM draft's inputs_embeds [B, S, H]
    attention_mask: ov.Output
    position_ids: ov.Output
    hidden_states: ov.Output
    beam_idx: ov.Output


def parameters(cfg: Eagle3Config) -> tuple[list[ov.Node], Inputs]:
    """genai's inputs as optimum-intel 2.2.0 exports them; hidden_states is all dynamic (3*H wide here, H wide once
    genai has moved fc into the target). A VLM draft takes inputs_embeds and position_ids [3, B, S]: genai
    2026.4.1's VLM EAGLE-3 path (eagle3_strategy.cpp create_draft_input_embeddings, add_request) feeds it the
    target's embeddings and mrope positions, each shifted by one token."""
    shapes = {"input_ids": ([-1, -1], ov.Type.i64), "inputs_embeds": ([-1, -1, cfg.hidden_size], ov.Type.f32),
              "attention_mask": ([-1, -1], ov.Type.i64),
              "position_ids": ([rope.MROPE_ROWS, -1, -1] if cfg.vlm else [-1, -1], ov.Type.i64),
              "hidden_states": ([-1, -1, -1], ov.Type.f32), "beam_idx": ([-1], ov.Type.i32)}
    params = []
    for name in (VLM_INPUTS if cfg.vlm else INPUTS):
        dims, dtype = shapes[name]
        p = ops.parameter(ov.PartialShape(dims), dtype, name=name)
        p.output(0).set_names({name})
        params.append(p)
    return params, Inputs(*(p.output(0) for p in params))


def attention(a: ov.Output, x: Inputs, w: Weights, cfg: Eagle3Config) -> tuple[ov.Output, list[ov.Node]]:
    """Causal GQA over the KV state and the new rows; returns o_proj's output and the two Assign sinks."""
    name, nH, nKV, D = LAYER + "self_attn", cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    q = heads(linear(a, w(f"{name}.q_proj.weight"), f"{name}.q_proj"), nH, D, f"{name}/q_heads")
    k = heads(linear(a, w(f"{name}.k_proj.weight"), f"{name}.k_proj"), nKV, D, f"{name}/k_heads")
    if cfg.qk_norm:  # [B, S, n, D]: over head_dim, each head alone, before RoPE (transformers' Qwen3Attention)
        q = rms_norm(q, w(f"{name}.q_norm.weight"), cfg.rms_norm_eps, f"{name}.q_norm")
        k = rms_norm(k, w(f"{name}.k_norm.weight"), cfg.rms_norm_eps, f"{name}.k_norm")
    v = heads(linear(a, w(f"{name}.v_proj.weight"), f"{name}.v_proj"), nKV, D, f"{name}/v_heads")
    cos, sin = rope.cos_sin(x.position_ids, cfg.rope, D, f"{name}.rotary_emb")
    q = apply_rope(to_bnsd(q), cos, sin, D, D, f"{name}/q_rope", fusable=True)  # [B, nH, S, D]
    k = apply_rope(to_bnsd(k), cos, sin, D, D, f"{name}/k_rope", fusable=True)  # [B, nKV, S, D]
    batch = ops.gather(ops.shape_of(x.tokens, ov.Type.i64), const([0], I64), const(0, I64)).output(0)
    k_all, k_sink = kv_cache(k, x.beam_idx, batch, KEY_STATE, nKV, D, f"{name}/key_cache")
    v_all, v_sink = kv_cache(to_bnsd(v), x.beam_idx, batch, VALUE_STATE, nKV, D, f"{name}/value_cache")
    bias = attention_mask_bias(x.attention_mask, q, k_all, f"{name}/attention")
    out = sdpa(q, expand_kv(k_all, cfg.kv_groups, nH, D, f"{name}/key_gqa"),
               expand_kv(v_all, cfg.kv_groups, nH, D, f"{name}/value_gqa"), bias, D, f"{name}/sdpa")
    out = named(ops.reshape(to_bnsd(out), const([0, 0, nH * D], I64), special_zero=True), f"{name}/merge_heads")
    return linear(out, w(f"{name}.o_proj.weight"), f"{name}.o_proj"), [k_sink, v_sink]


def graph(x: Inputs, w: Weights, cfg: Eagle3Config) -> tuple[dict[str, ov.Output], list[ov.Node]]:
    """logits and d2t (the module docstring), and the Assign sinks of the KV state."""
    def norm(t: ov.Output, name: str) -> ov.Output:
        return rms_norm(t, w(f"{name}.weight"), cfg.rms_norm_eps, name)

    e = x.tokens if cfg.vlm else embedding(x.tokens, cfg)  # [B, S, H]
    h = linear(x.hidden_states, w("fc.weight"), "fc")  # [B, S, H]: the first MatMul on hidden_states
    hn = norm(h, LAYER + "hidden_norm")
    a = named(ops.concat([norm(e, LAYER + "input_layernorm"), hn], axis=-1), LAYER + "self_attn/input")  # [B,S,2H]
    attn, sinks = attention(a, x, w, cfg)
    r1 = named(ops.add(hn if cfg.norm_before_residual else h, attn), LAYER + "attn_residual")
    mlp = swiglu(norm(r1, LAYER + "post_attention_layernorm"),
                 *(w(f"{LAYER}mlp.{n}.weight") for n in ("gate_proj", "up_proj", "down_proj")), LAYER + "mlp",
                 fusable=True)
    r2 = named(ops.add(r1, mlp), LAYER + "mlp_residual")  # input 1 is down_proj's MatMul(Multiply): genai's pattern
    logits = linear(norm(r2, "norm"), w("lm_head.weight"), "lm_head")
    d2t = ops.constant(offsets(w, cfg), ov.Type.i64)
    d2t.set_friendly_name(D2T)
    return {LOGITS: logits, D2T: d2t.output(0)}, sinks


def embedding(input_ids: ov.Output, cfg: Eagle3Config) -> ov.Output:
    table = const(np.zeros((1, cfg.hidden_size), np.float32), name=f"{EMBED}.weight")  # replaced by genai at load
    return named(ops.gather(table, input_ids, const(0, I64)), EMBED)


RECIPE = Recipe("eagle3_draft", parse_config, tensors, parameters, graph, rt_info={EAGLE3_MODE: "True"})
