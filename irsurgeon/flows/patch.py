"""Make an exported target directory ready for a draft family in place: check, build, stage, verify, commit.

The same flow for every registered family (draft.protocol.Family); the family supplies what differs:

    lock       the target's directory lock, held from here to the end (a second run fails at once, or waits with
               --wait, and never builds beside this one)
    recover    what an interrupted run left in the target is rolled back or cleared first (irsurgeon.commit.transaction)
    source     the checkpoint's config.json (for a repo id: fetched with the index, no weight yet), so a checkpoint that
               is not there is said first, whatever the target holds
    family     the checkpoint's, resolved once (families.registry.for_config: its config.json and, where a family
               asks, what it holds: weights.held.Held), and the config as that family reads what it holds
               (Family.reading: a key set aside is said in one line); a model_type that is not a string, the
               target's or the checkpoint's, is refused (config.checked_model_type)
    edits      Options.config_edits (what `tune` settles: one alternative of each Family.readings) set over that
               config, said in one line, staged as the draft's config.json where the family writes one and recorded
               in its provenance (config_edits); without edits, a reading the checkpoint leaves open is noted
    prefetch   a local checkpoint's head tensors asked of the kernel (posix_fadvise) on a thread, while the steps
               below judge the target: a hint that reads, checks and writes nothing (irsurgeon.weights.prefetch)
    target     family.inspect: the layout its genai path needs, refused in one line otherwise
    configs    the files others read (generation configs, openvino_config.json) as verify checks them
               (verify.config_checks), refused before any work, patched directory or not
    done?      the family's verify passes and the draft is in the format (and built with the config edits) asked
               for: nothing to do (--force rebuilds)
    pair       family.pair checks geometry and identity before any weight is read, refusing a checkpoint of another
               model unless --allow-foreign-checkpoint (said, and recorded)
    plan       the weight format (auto mirrors the target: irsurgeon.quant.precision); --dry-run prints the steps
    build      the family's weights fetched (a repo id's `hub_prefix*` tensors, by byte range), loaded under
               strict accounting and built (irsurgeon.draft.build), then family.finish (compress, runtime options,
               provenance)
    stage      family.stage writes every new file into ONE transaction of the target (subfolders included) and
               checks each where it is staged; Options.tuned (what `tune` chose) adds the target's
               generation_config.json with its K (stage_k); the house commits them all at once, or none
    confirm    the family's verify of the committed directory: a rejection is an error, never "wrote ..." and exit 0;
               Ctrl-C once the commit is done says the patch is complete (errors.Interrupted, exit 130)
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Callable

from irsurgeon.core import rtinfo
from irsurgeon.draft.build import build_model
from irsurgeon.draft.load import load_with
from irsurgeon.draft.stream import stream_of
from irsurgeon.core.config import check_generation_config, peek_json, read_json
from irsurgeon.quant.formats import WEIGHT_FORMATS
from irsurgeon.core.text import a, silent
from irsurgeon.core.errors import (CheckpointError, CompressionError, ConfigError, Interrupted, IRSurgeonError,
                                   IRError, OutputError)
from irsurgeon.families import registry
from irsurgeon.draft.protocol import Family, Options, Pairing, Staging, Target
from irsurgeon.ir import files, xmlsafe
from irsurgeon.ir.export import CONFIG, GENERATION_CONFIG, directory_problem
from irsurgeon.quant.precision import build_format, choose_format
from irsurgeon.flows.show import weight_precision
from irsurgeon.ir.describe import weights
from irsurgeon.commit.transaction import (STAGE_DIR, DirectoryTransaction, PatchResult, acquire,
                                          clear_interrupted)
from irsurgeon.flows.verify import config_checks, verify_directory
from irsurgeon.weights import prefetch
from irsurgeon.weights.checkpoint import config_of, weightless
from irsurgeon.weights.held import Held
from irsurgeon.weights.hub import fetch_to_judge, fetch_weights, resolve_source

Echo = Callable[[str], None]


def elapsed(start: float) -> str:
    return f"{time.perf_counter() - start:.1f} s"


def patch(target_dir: str | Path, source: str | Path, *, options: Options = Options(), echo: Echo = silent) -> PatchResult:
    """The whole in-place flow (see the module docstring); returns what was written. echo: where its progress lines
    go (default: nowhere; the CLI prints them)."""
    start = time.perf_counter()
    target_dir = Path(target_dir)
    if options.weight_format.lower() not in WEIGHT_FORMATS:  # refused before any work or note
        raise CompressionError(f"unknown weight format {options.weight_format!r:.40}: expected one of "
                               f"{', '.join(WEIGHT_FORMATS)}")
    if options.dry_run or not target_dir.is_dir():  # writes nothing, or is refused below in its own words
        return _patch(target_dir, source, options, echo, start, None)
    held = acquire(target_dir, options.wait, echo)  # for the whole run: a second patch never builds beside this one
    try:
        with files.parsed_once():  # the target's IRs parsed once (irsurgeon.ir.files), as in the CLI
            return _patch(target_dir, source, options, echo, start, held)
    finally:
        os.close(held)


def _patch(target_dir: Path, source, options: Options, echo: Echo, start: float, held: int | None) -> PatchResult:
    """patch() under the directory lock it holds (held: its descriptor; None for a dry run)."""
    problem = directory_problem(target_dir)
    if problem:  # in the same words for every family, and as show, annotate and verify say it
        raise IRError(problem)
    if held is not None and os.path.lexists(target_dir / STAGE_DIR):  # a half-done commit mixes versions:
        clear_interrupted(target_dir, echo=echo, writable=registry.writable(), held=held)  # undone before judging
    refuse_local_source(Path(source), target_dir)
    peek_json(target_dir / CONFIG)  # the target's config.json: a model_type that is not a name is refused first
    root, where, config, read_as, holds, family = checkpoint_config(source, options.hub, echo)
    refuse_foreign_options(family, options)
    config, edited = with_edits(config, options.config_edits, str(where))
    for line in read_as + edited:
        echo(line)
    if Path(source).exists() and not options.dry_run:  # a local checkpoint, folder or file: its head's bytes are
        prefetch.start(family.recipe(), Path(source))  # read ahead while the target is judged (a hint only)
    target = inspect(family, target_dir, source)
    for line in target.warnings:  # here, not in inspect: verify re-inspects the target
        echo(line)
    refuse_unreadable_configs(family, target.path)
    cfg = family.recipe().parse_config(config, str(where))  # a checkpoint refused so is refused for a ready target too
    result = PatchResult(target.path, run_hint=family.run_hint(target.path), family=family.key)
    if is_done(family, target.path, options, echo):
        result.skipped = True
        return result
    for line in cfg.warnings:  # said once, dry run or not (the build reads cfg as given)
        echo(line)
    if options.config_edits is None:
        for reading in family.readings(config, holds, target):
            echo(f"note: {reading.why}: built as {reading.alternatives[0][0]}; `irsurgeon tune {target.path}` "
                 f"settles it by the drafts accepted")
    refuse_unwritable(target.path, options.dry_run)  # before the pair check and the build, dry run or not
    staging = Staging(root, str(source), cfg, options, echo, read_as=config if read_as or edited else None)
    pairing = pair(family, target, staging)
    staging.choice, result.plan = plan(family, target, source, options, echo)
    if staging.choice is None:
        result.skipped = True
        return result
    staging.root = fetch(family, source, root, options, echo)
    staging.provenance = provenance(options, source, pairing.identity)
    result.written = commit(family, target, staging, start, held)
    return result


def checkpoint_config(source, hub, echo: Echo) -> tuple[Path, Path, dict, list[str], Held, Family]:
    """A checkpoint's directory (a repo id: its snapshot, config.json and the index fetched, no weight yet), its
    config.json, that config as its family reads what the checkpoint holds (Family.reading) with the lines saying
    what was set aside, what it holds, and its family: what patch and tune both start from."""
    root = resolve_source(source, echo, hub)
    where = config_of(root)
    config, holds = read_json(where), Held(root)
    family, holds = family_of(config, str(where), source, root, holds, hub, echo)
    config, read_as = family.reading(config, holds, str(where))
    return root, where, config, read_as, holds, family


def family_of(config: dict, where: str, source, root: Path, holds: Held, hub, echo: Echo) -> tuple[Family, Held]:
    """The checkpoint's family (registry.for_config) and what it holds: a repo id whose labels name no family and
    whose snapshot shows no tensor name has its weights fetched first (into the caches, where the build finds them
    again), so that what it holds decides (weights.hub.fetch_to_judge)."""
    try:
        return registry.for_config(config, where, holds), holds
    except ConfigError:
        if holds.known or (fetched := fetch_to_judge(source, root, hub, echo)) is None:
            raise
    holds = Held(fetched)
    return registry.for_config(config, where, holds), holds


# Options fields only some families read, and their words (the CLI's flags spell them --hidden-layers, ...)
FAMILY_OPTIONS = {"hidden_layers": "hidden layers", "kv_cache_precision": "KV cache precision"}


def refuse_foreign_options(family: Family, options: Options) -> None:
    """An option the checkpoint's family does not read is refused, never silently ignored."""
    for name, words in FAMILY_OPTIONS.items():
        if getattr(options, name) is not None and name not in family.patch_options:
            takers = [f.title for f in registry.FAMILIES if name in f.patch_options]
            said = ", ".join(takers[:-1]) + f" and {takers[-1]}" if len(takers) > 1 else "".join(takers)
            raise ConfigError(f"the {words} option applies to {said or 'no family'} checkpoints; this one is "
                              f"{a(family.title)}'s")


def refuse_unwritable(target: Path, dry_run: bool) -> None:
    """A target the draft cannot be written into (a read-only file system, no write permission for this user) is
    refused before any work: a dry run says so instead of planning a write that would fail."""
    if os.access(target, os.W_OK | os.X_OK):
        return
    try:
        read_only = bool(os.statvfs(target).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    why = "on a read-only file system" if read_only else "not writable by this user"
    raise OutputError(f"{target}: {why}; the draft cannot be written into it"
                      + (" (a real run would fail here)" if dry_run else ""))


def refuse_local_source(source: Path, target_dir: Path) -> None:
    """A local --checkpoint that can hold no weights (checkpoint.weightless: what Checkpoint.open would refuse
    after the identity check and the notes), refused before any check or note; the target itself said so."""
    problem = weightless(source)
    if problem:
        itself = source.is_dir() and target_dir.is_dir() and os.path.samefile(source, target_dir)
        raise CheckpointError(f"{source}: " + ("is the target directory itself; the checkpoint is the safetensors "
                                               "checkpoint the target was exported from" if itself else problem))


def commit(family: Family, target, staging: Staging, start: float, held: int | None) -> list[str]:
    """Build, finish and stage the draft with everything else the family writes, commit it at once, then confirm
    it; returns the names written. An uncompressed draft's checkpoint stays open until its matrices are staged
    (build.Stream), closed whatever happens. Ctrl-C once the commit is done (held through it, or during the
    confirming verify) is an Interrupted saying the patch is complete: the directory is patched, only its check did
    not run."""
    staging.model = build(family, staging)
    stream = stream_of(staging.model)  # the family takes the model; this keeps its checkpoint's handle
    tx = DirectoryTransaction(target.path, writable=registry.writable(), wait=staging.options.wait,
                              echo=staging.echo, recorded=True, held=held)
    try:
        staging.model = family.finish(staging.model, staging)
        with tx:
            family.stage(tx, target, staging)
            if staging.options.tuned is not None and staging.options.tuned.k is not None:
                stage_k(tx, target.path, staging.options.tuned.k)
            tx.commit()
        staging.echo(f"{target.path}: wrote {', '.join(tx.names)} in {elapsed(start)}")
        confirm(family, target.path)
    except KeyboardInterrupt:
        if not tx.committed:
            raise  # nothing moved in: the plain interruption it is
        raise Interrupted(f"{target.path}: the patch is complete (committed {', '.join(tx.names)}); the check of it "
                          f"after the commit was interrupted: irsurgeon verify {target.path} runs it") from None
    finally:
        if stream is not None:
            stream.close()
        files.forget_kept()  # the annotation's read-back, kept for the verify after the commit
    return list(tx.names)


def confirm(family: Family, target: Path) -> None:
    """The committed directory must pass its family's verify: patch never reports success on one verify rejects
    (something the staged checks could not see, e.g. a file beside the ones written)."""
    failed = [c for c in verify_directory(target, family=family) if not c.ok]
    if failed:
        raise IRSurgeonError(f"{target}: the files were written, but verify rejects the directory: {failed[0].name}: "
                             f"{failed[0].detail}")


def refuse_unreadable_configs(family: Family, target: Path) -> None:
    """The config files others read that verify would reject (verify.config_checks: the generation configs,
    openvino_config.json), refused before any work, whether the directory is patched or not; a file the patch
    writes anew is left to it."""
    failed = [c for c in config_checks(target, family, family.layout.writes) if not c.ok]
    if failed:
        raise ConfigError(failed[0].detail)


def inspect(family: Family, target_dir: Path, source) -> Target:
    """family.inspect; when the checkpoint chose a family the directory is not of, the refusal names both."""
    try:
        target = family.inspect(target_dir)
    except IRSurgeonError as e:
        if registry.for_directory(target_dir) is family:
            raise
        raise type(e)(f"{target_dir} is not a target for {source}, {a(family.title)} checkpoint: "
                      f"{e}") from None
    if not isinstance(target, Target):
        raise TypeError(f"{family!r}.inspect returned {type(target).__name__}, not a draft.protocol.Target")
    return target


def is_done(family: Family, target: Path, options: Options, echo: Echo) -> bool:
    """True (said so) when the family's verify passes and the draft is the one asked for (its weight format, and what
    family.stale compares); options.force: never.

    An explicit --weight-format other than the present draft's rebuilds it: the user asked for that format, as a
    re-export with another format would give it. `auto` keeps any conforming draft. So does a KV cache precision
    asked other than the one the draft records (rt_info runtime_options), never quietly ignored.
    """
    draft = target / family.layout.draft_xml
    if options.force or not draft.is_file():
        return False
    checks = verify_directory(target, family=family)
    if not all(c.ok for c in checks):
        failed = next(c for c in checks if not c.ok)
        echo(f"{target}: has {family.layout.draft_xml} but does not pass verify ({failed.name}); rebuilding it")
        return False
    present, asked = draft_format(draft), options.weight_format.lower()
    if asked != "auto" and present != asked:
        echo(f"{target}: its draft is {present or 'of unknown format'}; weight format {asked} asked: rebuilding it")
        return False
    if options.kv_cache_precision is not None and recorded_kv(draft) != options.kv_cache_precision.lower():
        echo(f"{target}: its draft's KV cache precision is {recorded_kv(draft) or 'unrecorded'}; "
             f"{options.kv_cache_precision} asked: rebuilding it")
        return False
    if options.config_edits is not None and recorded_edits(draft) != options.config_edits:
        echo(f"{target}: its draft was built with config edits {edits_text(recorded_edits(draft)) or 'none'}; "
             f"{edits_text(options.config_edits) or 'none'} asked: rebuilding it")
        return False
    other = family.stale(target, options)
    if other:
        echo(f"{target}: {other}: rebuilding it")
        return False
    echo(f"{target}: already has its draft ({a(family.title)}, {draft_format(draft) or 'format unrecorded'}), which "
         f"passes its {len(checks)} checks (irsurgeon verify {target} lists them); nothing to do (a forced run "
         f"rebuilds it)")
    return True


CONFIG_EDITS = "config_edits"  # the draft's provenance: Options.config_edits it was built with, as JSON


def with_edits(config: dict, edits: dict | None, where: str) -> tuple[dict, list[str]]:
    """The checkpoint's config with Options.config_edits set over it (one alternative of each Family.readings: what
    `tune` settles), and the line saying so; refused in one line when the edits are not JSON object members."""
    if not edits:
        return config, []
    edits_text(edits)
    return {**config, **edits}, [f"{where}: read with {edits_text(edits)} set over it (config edits)"]


def edits_text(edits: dict | None) -> str:
    """Config edits as recorded in a draft's provenance: compact JSON, keys sorted; "" for none."""
    if not edits:
        return ""
    if not isinstance(edits, dict) or not all(isinstance(k, str) for k in edits):
        raise ConfigError(f"config edits {edits!r:.60}: expected a mapping of config.json keys to JSON values")
    try:
        return json.dumps(edits, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"config edits {edits!r:.60}: not JSON values ({e})") from None


def recorded(xml: Path, *key: str):
    """The rt_info value a built draft records under `key` (None when absent), from its checked `.xml` bytes."""
    return xmlsafe.get_value(files.read_ir_bytes(xml), key, str(xml))


def recorded_kv(xml: Path) -> str | None:
    """The KV cache precision the draft's rt_info runtime_options record, lower case (None: none recorded)."""
    value = recorded(xml, rtinfo.RUNTIME_OPTIONS, rtinfo.KV_CACHE_PRECISION)
    return str(value).lower() if value else None


def recorded_edits(xml: Path) -> dict:
    """The config edits a built draft records in its provenance ({} for none, or for a record that is not a JSON
    object)."""
    return files.rt_info_object(xml, (rtinfo.PROVENANCE, CONFIG_EDITS)) or {}


def draft_format(xml: Path) -> str | None:
    """The draft's weight format: its provenance (rt_info irsurgeon/weight_format), else read from its weights."""
    found = recorded(xml, rtinfo.PROVENANCE, "weight_format")
    if found:
        return found
    found = weight_precision(weights(files.read_model(xml, checked=True)))
    return "f16" if found == "bf16" else found


def pair(family: Family, target: Target, staging: Staging) -> Pairing:
    """The family's pair check; what it cannot prove offline is said once."""
    pairing = family.pair(target, staging)
    if pairing.unproven:
        staging.echo(f"note: {pairing.unproven}")
    return pairing


def plan(family: Family, target, source, options: Options, echo: Echo):
    """The format choice for the draft (None when there is nothing to write: a dry run) and a dry run's steps."""
    interrupted = os.path.lexists(target.path / STAGE_DIR)  # only a dry run gets here with leftovers
    choice = choose_format(options.weight_format, target.path if options.weight_format == "auto" else None)
    if choice.note:
        echo(choice.note)
    if not options.dry_run:
        return choice, []
    steps = [f"{family.plan_steps(target, choice)[0]} from {source}", *family.plan_steps(target, choice)[1:]]
    if interrupted:
        steps.insert(0, f"roll back or clear what an interrupted run left in {STAGE_DIR}")
    for step in steps:
        echo(f"would {step}")
    return None, steps


def fetch(family: Family, source, root: Path, options: Options, echo: Echo) -> Path:
    """The weights the family builds from: for a repo id, its `hub_prefix*` tensors by byte range (irsurgeon's
    cache folder of that commit); a local checkpoint as it is."""
    return fetch_weights(source, root, options.hub, family.hub_prefix, echo)


def build(family: Family, staging: Staging):
    """The draft as an ov.Model, through the house's loader and build (strict tensor accounting for every family).

    Uncompressed (f32 or f16), a draft's matrices are left to stage_ir, which reads them from the checkpoint as it
    writes them (build.Stream): the checkpoint stays open until then, and the model holds no matrix."""
    recipe, options = family.recipe(), staging.options
    cfg, weights, ckpt = load_with(recipe, staging.root, allow_nonfinite=options.allow_nonfinite, warn=staging.echo,
                                   cfg=staging.cfg)
    try:
        model = build_model(cfg, weights, build_format(staging.choice), staging.echo, recipe=recipe,
                            stream=None if staging.choice.params else ckpt.close)
    except BaseException:
        ckpt.close()
        raise
    if stream_of(model) is None:
        ckpt.close()  # the model owns its weights now: release the mapped shards before the next steps
    return model


def provenance(options: Options, source, identity: str) -> dict[str, str]:
    """What the draft records of where it came from (rt_info irsurgeon/...)."""
    fields = {"source": str(source), "checkpoint_identity": identity}
    if options.hub and options.hub.revision:
        fields["revision"] = options.hub.revision
    if options.config_edits:
        fields[CONFIG_EDITS] = edits_text(options.config_edits)
    if options.tuned is not None:
        fields[rtinfo.TUNING] = options.tuned.record
    return {k: v for k, v in fields.items() if v}  # a family that proves no identity records none


K_KEY = "num_assistant_tokens"


def with_k(path: Path, k: int) -> bytes:
    """generation_config.json with num_assistant_tokens k, every other key as it was (a file that is not there: only
    that key); the file there is checked first as openvino-genai reads it, refused before anything is written."""
    check_generation_config(path)
    config = read_json(path) if path.exists() else {}
    config[K_KEY] = k
    return (json.dumps(config, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def stage_k(tx: DirectoryTransaction, target: Path, k: int) -> None:
    """Stage the target's generation_config.json with num_assistant_tokens k (with_k)."""
    tx.write(GENERATION_CONFIG, with_k(target / GENERATION_CONFIG, k))
