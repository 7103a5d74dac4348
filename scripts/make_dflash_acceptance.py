"""tests/data/dflash/cycle/acceptance.json: how often openvino-genai accepts the drafts of optimum-intel's export of the
`synth --kind dflash-cycle` draft, per prompt and K, the golden irsurgeon's own draft of that checkpoint must match.

    python3 scripts/make_dflash_acceptance.py [OUT_JSON] [--ref /tmp/dflash-ref] [--seed 0]

Run with the product's Python (openvino-genai); only the export runs in the reference venv (--ref, made as
scripts/make_dflash_reference.py says: torch, transformers 5.2.0, optimum 2.3.0, optimum-intel 2.2.0, dflash 0.1.0).
Steps: synth the pair (irsurgeon.families.dflash.synth_cycle) and patch its target with its checkpoint (ours); copy
that directory with dflash_draft/openvino_model.xml/.bin replaced by optimum-intel's fp32 export of the same
checkpoint (theirs); run irsurgeon.flows.genai.run_equivalence on each (the plain and the DFlash LLMPipeline at
INFERENCE_PRECISION_HINT=f32, greedy, EOS ignored, one DFlash pipeline for every K) and write theirs, after checking
both are token-identical to plain greedy. The counts of ours are printed beside them; a difference is an error.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dflash_export import export  # noqa: E402  (scripts/, with the imports after sys.path is set)
from irsurgeon.families import registry  # noqa: E402  (sys.path set above)
from irsurgeon.flows.genai import run_equivalence  # noqa: E402  (sys.path set above)
from irsurgeon.flows.prompts import TEXTS as PROMPTS  # noqa: E402  (sys.path set above)

KIND = "dflash-cycle"
# three built-in prompts (their last tokens lie on 3-cycles) and one whose last token lies on a 4-cycle at seed 0
GOLDEN_PROMPTS = (PROMPTS[0], PROMPTS[2], PROMPTS[3], "Many happy returns")
NATS = (1, 2, 3, 4, 5, 6, 7)
MAX_NEW_TOKENS = 32
REF_PACKAGES = ("torch", "transformers", "optimum", "optimum-intel", "dflash", "openvino")
DRAFT_IR = ("openvino_model.xml", "openvino_model.bin")


def cli(*args: str) -> None:
    r = subprocess.run([sys.executable, "-m", "irsurgeon", *args], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    if r.returncode:
        raise RuntimeError(f"irsurgeon {' '.join(args)} failed:\n{r.stdout}{r.stderr}")


def ref_versions(ref: Path) -> dict[str, str]:
    code = ("import json, importlib.metadata as m; "
            f"print(json.dumps({{p: m.version(p) for p in {list(REF_PACKAGES)!r}}}))")
    return json.loads(subprocess.run([str(ref / "bin" / "python"), "-c", code], capture_output=True, text=True,
                                     check=True).stdout)


def counts(target: Path) -> list[dict]:
    report = run_equivalence(target, list(GOLDEN_PROMPTS), NATS, MAX_NEW_TOKENS, echo=lambda line: None)
    if not report.identical:
        raise RuntimeError(f"{target}: DFlash output differs from plain greedy: {report.as_dict()['runs']}")
    return [{"prompt": r.prompt, "num_assistant_tokens": r.num_assistant_tokens, "accepted": r.accepted,
             "drafted": r.draft_tokens, "tokens": r.tokens} for r in report.runs]


def dumps(data: dict) -> str:
    """JSON with one line per run."""
    runs = ",\n  ".join(json.dumps(r) for r in data["runs"])
    head = json.dumps({k: v for k, v in data.items() if k != "runs"}, indent=1)
    return f"{head[:-2]},\n \"runs\": [\n  {runs}\n ]\n}}\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path, nargs="?", default=ROOT / "tests" / "data" / "dflash" / "cycle" /
                    "acceptance.json")
    ap.add_argument("--ref", type=Path, default=Path("/tmp/dflash-ref"), help="the reference venv")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        parts = registry.synth_kinds()[KIND].synth(KIND, tmp / "pair", args.seed, False)
        ours, theirs = tmp / "ours", tmp / "theirs"
        shutil.copytree(parts["target"], ours)
        cli("patch", str(ours), "--checkpoint", str(parts["ckpt"]))
        shutil.copytree(ours, theirs)
        command = export(parts["ckpt"], tmp / "optimum", draft=True, cli=args.ref / "bin" / "optimum-cli")
        command = [f"{KIND}/ckpt" if c == str(parts["ckpt"]) else c for c in command]
        for name in DRAFT_IR:
            shutil.copy(tmp / "optimum" / name, theirs / "dflash_draft" / name)
        golden, mine = counts(theirs), counts(ours)
    for g, m in zip(golden, mine):
        print(f"prompt {g['prompt']} K {g['num_assistant_tokens']}: optimum-intel {g['accepted']}/{g['drafted']}, "
              f"irsurgeon {m['accepted']}/{m['drafted']} ({g['tokens']} tokens)")
    data = {"provenance": {
        "made_by": "scripts/make_dflash_acceptance.py", "kind": KIND, "seed": args.seed,
        "draft": "optimum-intel fp32 export of the synth checkpoint: " + " ".join(command),
        "reference_venv": ref_versions(args.ref),
        "runtime": {p: version(p) for p in ("openvino", "openvino-genai")},
        "run": "irsurgeon.flows.genai.run_equivalence: LLMPipeline on the paged backend, prefix caching off, "
               "INFERENCE_PRECISION_HINT=f32, greedy, EOS ignored; accepted = get_num_accepted_tokens(), drafted = "
               "get_num_draft_processed_tokens()"},
        "prompts": list(GOLDEN_PROMPTS), "max_new_tokens": MAX_NEW_TOKENS, "runs": golden}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(dumps(data))
    if golden != mine:
        raise SystemExit("irsurgeon's draft is accepted differently from optimum-intel's (above)")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
