"""The conditions openvino-genai 2026.4.1's EAGLE-3 load-time surgery puts on a draft IR, checked without genai.

openvino.genai (master da1db864; the 2026.4.1 binary carries the same assertion strings)
src/cpp/src/speculative_decoding/eagle3_model_transforms.cpp:
    embedding      find_embedding_gather: the first Gather in get_ordered_ops() whose data (input 0) has static rank
                   >= 2 and dim 0 > 1000, or whose name contains embed_tokens / embedding; share_vocabulary replaces
                   that data with the target's table (and returns silently when there is none)
    fc             move_fc_from_draft_to_main: the first MatMul whose input 0 is a Parameter named *hidden_states*;
                   its weight becomes MatMul(concat, W, transpose_b=true) in the target, so W is [H, 3*H_t]
    fed back       transform_hidden_state(draft, {-1}): the first Add named *midlayer* whose input 1 is a MatMul
                   whose input 0 is a Multiply becomes the last_hidden_state output
    d2t            extract_d2t_mapping_table: a Result fed by a Constant named *d2t*; the sampler reads it as int64
    rt_info        apply_eagle3_rt_info: eagle3_mode true, hidden_layers_list read as std::vector<int> (3 ids)
    VLM draft      no embedding Gather (the target's language model has none either, so share_vocabulary returns);
                   the model runner sets the tensors inputs_embeds and position_ids [3, 1, T] by name
                   (continuous_batching/model_runner.hpp), so the draft must have both, the latter of rank 3
"""
from __future__ import annotations

from irsurgeon.families.eagle3.model import EAGLE3_MODE, HIDDEN_LAYERS


def embedding_gather(model):
    for op in model.get_ordered_ops():
        if not op.get_type_name().startswith("Gather") or op.get_type_name() in ("GatherND", "GatherElements"):
            continue
        data = op.input_value(0)
        shape = data.get_partial_shape()
        big = shape.rank.is_static and shape.rank.get_length() >= 2 and shape[0].is_static and shape[0].get_length() > 1000
        name = op.get_friendly_name()
        if big or "embed_tokens" in name or "embedding" in name:
            return op
    return None


def fc_matmul(model):
    for op in model.get_ordered_ops():
        if op.get_type_name() != "MatMul":
            continue
        src = op.input_value(0).get_node()
        if src.get_type_name() == "Parameter" and "hidden_states" in src.get_friendly_name():
            return op
    return None


def fed_back_add(model):
    for op in model.get_ordered_ops():
        if op.get_type_name() == "Add" and "midlayer" in op.get_friendly_name():
            mm = op.input_value(1).get_node()
            if mm.get_type_name() == "MatMul" and mm.input_value(0).get_node().get_type_name() == "Multiply":
                return op
    return None


def d2t_constant(model):
    for result in model.get_results():
        src = result.input_value(0).get_node()
        if src.get_type_name() == "Constant" and "d2t" in src.get_friendly_name():
            return src
    return None


def vlm_inputs(model) -> str | None:
    """What a VLM draft's inputs lack (None: inputs_embeds [?, ?, H] and position_ids of rank 3 are there)."""
    shapes = {name: p.get_partial_shape() for p in model.inputs for name in p.get_names()}
    if "inputs_embeds" not in shapes or shapes["inputs_embeds"].rank.get_length() != 3:
        return "no inputs_embeds [B, S, H] input (genai feeds a VLM target's draft embeddings)"
    if "position_ids" not in shapes or shapes["position_ids"].rank.get_length() != 3:
        return "position_ids is not [3, B, S] (genai feeds a VLM target's draft 3-row mrope positions)"
    return None


def problems(model, hidden_size: int, target_hidden_size: int, taps: int | None = 3, vlm: bool = False) -> list[str]:
    """What genai's surgery would not find, or find in another form than it needs (empty: none)."""
    out = []
    gather = embedding_gather(model)
    if vlm:
        missing = vlm_inputs(model)
        out += [missing] if missing else []
    elif gather is None or gather.input_value(0).get_node().get_type_name() != "Constant":
        out.append("no embedding Gather of a constant table named embed_tokens (genai would share no vocabulary)")
    fc = fc_matmul(model)
    if fc is None:
        out.append("no MatMul reads the hidden_states Parameter (genai finds no fc to move into the target)")
    else:
        w = fc.input_value(1).get_partial_shape()
        want = [hidden_size, 3 * target_hidden_size]
        if not fc.get_attributes().get("transpose_b") or w.is_dynamic or [d.get_length() for d in w] != want:
            out.append(f"fc reads a weight of {w} (transpose_b {fc.get_attributes().get('transpose_b')}), genai "
                       f"rebuilds it as [{want[0]}, {want[1]}] with transpose_b")
    if fed_back_add(model) is None:
        out.append("no Add named midlayer fed by MatMul(Multiply) (genai would feed no hidden state back)")
    d2t = d2t_constant(model)
    if d2t is None or d2t.get_output_element_type(0).get_type_name() != "i64":
        out.append("no i64 Constant named d2t feeding a Result (genai's sampler reads the map as int64)")
    mode = model.get_rt_info([EAGLE3_MODE]).astype(str) if model.has_rt_info([EAGLE3_MODE]) else None
    if mode not in ("True", "true"):
        out.append(f"rt_info {EAGLE3_MODE} is {mode!r}, expected True")
    if taps is not None:
        listed = model.get_rt_info([HIDDEN_LAYERS]).astype(str).split() if model.has_rt_info([HIDDEN_LAYERS]) else []
        if len(listed) != taps or not all(t.isdigit() for t in listed):
            out.append(f"rt_info {HIDDEN_LAYERS} is {' '.join(listed)!r:.60}, expected {taps} layer ids")
    return out
