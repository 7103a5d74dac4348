"""`irsurgeon verify` for an EAGLE-3 directory: what openvino-genai 2026.4.1's EAGLE-3 path reads, without genai.

    target layout    a text export with a logits MatMul (target.inspect_target), and the layers genai can tap
    draft files      eagle3_draft/ openvino_model.xml/.bin and config.json
    draft pair       target.check_pair on eagle3_draft/config.json (and on --checkpoint's config.json)
    draft surgery    genai's load-time conditions (surgery.problems), and hidden_layers_list naming tappable layers

Each check is a Check row; a failed check never raises. The house (irsurgeon.flows.verify) adds the interrupted-run line.
"""
from __future__ import annotations

from pathlib import Path

from irsurgeon.core.config import read_json
from irsurgeon.core.errors import IRError, IRSurgeonError
from irsurgeon.draft.protocol import Check
from irsurgeon.families.eagle3 import model as eagle3
from irsurgeon.families.eagle3 import surgery
from irsurgeon.families.eagle3.layout import CONFIG, DRAFT_DIR, DRAFT_FILES, MODEL_XML
from irsurgeon.families.eagle3.patch import recorded_taps
from irsurgeon.families.eagle3.target import Eagle3Target, check_pair, inspect_target
from irsurgeon.ir import files
from irsurgeon.weights.checkpoint import config_of


def verify(target: Path, checkpoint: str | Path | None = None, hub=None, echo=print) -> list[Check]:
    target = Path(target)
    try:
        info = inspect_target(target)
    except IRSurgeonError as e:
        return [Check("target layout", False, str(e))]
    checks = [Check("target layout", True, f"{info.xml_name}: {info.model_type}, hidden {info.hidden_size}, vocab "
                                           f"{info.vocab_size}, {info.num_layers} layers, {len(info.tappable)} "
                                           f"tappable")]
    draft = target / DRAFT_DIR
    missing = [n for n in DRAFT_FILES if not (draft / n).is_file()]
    checks.append(Check("draft files", not missing, f"missing {', '.join(f'{DRAFT_DIR}/{n}' for n in missing)} "
                        f"(irsurgeon patch {target} --checkpoint EAGLE3_CHECKPOINT)" if missing else
                        f"{DRAFT_DIR}/ holds {', '.join(DRAFT_FILES)}"))
    if missing:
        return checks
    try:
        cfg = eagle3.parse_config(read_json(draft / CONFIG), str(draft / CONFIG))
        taps = recorded(draft / MODEL_XML, cfg)
        check_pair(info, cfg, taps, recorded=True)  # the taps built in: patch may have been told others
    except IRSurgeonError as e:
        return checks + [Check("draft pair", False, str(e))]
    checks.append(Check("draft pair", True, f"hidden {cfg.hidden_size}, vocab {cfg.vocab_size} -> draft vocab "
                                            f"{cfg.draft_vocab_size}"))
    checks.append(Check("draft surgery", *surgery_check(draft / MODEL_XML, info, cfg)))
    if checkpoint is not None:
        checks.append(Check("checkpoint pair", *checkpoint_pair(info, Path(checkpoint))))
    return checks


def recorded(xml: Path, cfg) -> tuple[int, ...]:
    """The draft's rt_info hidden_layers_list: three distinct layer indices in the order its trainer fed them
    (model.in_trained_order), or an IRError saying what it holds."""
    taps = recorded_taps(xml)
    if taps is None or len(taps) != 3:
        raise IRError(f"{xml}: rt_info {eagle3.HIDDEN_LAYERS} is not three layer indices (openvino-genai 2026.4.1 "
                      f"reads it as the 3 target layers it taps)")
    if (twice := eagle3.repeated(taps)) is not None:
        raise IRError(f"{xml}: rt_info {eagle3.HIDDEN_LAYERS} {list(taps)} names layer {twice} twice: "
                      f"{eagle3.DISTINCT}")
    if eagle3.in_trained_order(taps, cfg.architecture) != taps:
        raise IRError(f"{xml}: rt_info {eagle3.HIDDEN_LAYERS} {list(taps)} is out of layer order: a "
                      f"{cfg.architecture} draft was fed its states in layer order, and genai feeds them in the "
                      f"list's")
    return taps


def surgery_check(xml: Path, info: Eagle3Target, cfg) -> tuple[bool, str]:
    try:
        model = files.read_model(xml)
    except IRSurgeonError as e:
        return False, str(e)
    found = surgery.problems(model, cfg.hidden_size, cfg.target_hidden_size, vlm=cfg.vlm)
    if found:
        return False, f"{DRAFT_DIR}/{MODEL_XML}: {found[0]}"
    taps = [int(t) for t in model.get_rt_info([eagle3.HIDDEN_LAYERS]).astype(str).split()]
    bad = [t for t in taps if t not in info.tappable]
    if bad:
        return False, f"{eagle3.HIDDEN_LAYERS} {taps} names layer {bad[0]}, which genai cannot tap in this target"
    fed = "inputs_embeds and mrope positions" if cfg.vlm else "embedding"
    return True, f"fc, {fed}, fed-back residual and d2t in genai's forms; taps the outputs of layers {taps}"


def checkpoint_pair(info: Eagle3Target, checkpoint: Path) -> tuple[bool, str]:
    try:
        where = config_of(checkpoint)
        check_pair(info, eagle3.parse_config(read_json(where), str(where)))
    except IRSurgeonError as e:
        return False, str(e)
    return True, f"{checkpoint} is an EAGLE-3 draft of this target's geometry"
