"""irsurgeon: graph surgery on OpenVINO IR.

Public API (openvino is imported on first use, so `import irsurgeon` and the CLI start fast):
    build_mtp_model, save_draft   the Qwen3.5 MTP head from safetensors, and writing it
    build_head                        build -> compress -> KV-cache precision -> save, as `build-mtp` does
    patch_directory, Options          make an exported directory ready for a draft of any family in place
                                      (irsurgeon.flows.patch.patch); HubOptions: revision, token, cache for a repo id
    verify_directory                  the contract checks of a directory, one (name, ok, detail) per check
    annotate_ir, show_path            hidden-state annotation; what an IR or directory holds (irsurgeon.flows.show.show)
    load_config, MTPConfig            the head's configuration from config.json
    IRSurgeonError                    the base of every error irsurgeon raises on purpose
No exported name is also a submodule's: `irsurgeon.flows.patch` and `irsurgeon.flows.show` are the modules, always.
"""
import sys
from importlib import import_module

__version__ = "0.1.0"

# No telemetry. `import openvino` starts openvino's usage telemetry (openvino/tools/ovc/__init__.py calls
# init_ovc_telemetry, 2026.4.1), which writes $HOME/intel/openvino_ga_cid and stats and forks reporter processes; nncf
# does the same through nncf/telemetry/wrapper.py. Both fall back to their no-op stubs when `import
# openvino_telemetry` raises ImportError (openvino/tools/ovc/telemetry_utils.py, nncf 3.4.0), which a None entry in
# sys.modules makes it do. Set before irsurgeon imports openvino; a process that imported openvino first already ran it.
if "openvino" not in sys.modules:
    sys.modules.setdefault("openvino_telemetry", None)

_LAZY = {  # exported name -> (module, attribute); nothing is imported here, so that `irsurgeon` starts straight into
    # its entry point (irsurgeon.entry: a Ctrl-C from its first instruction on is one line and exit 130)
    "IRSurgeonError": ("irsurgeon.core.errors", "IRSurgeonError"),
    "build_mtp_model": ("irsurgeon.flows.standalone", "build_mtp_model"),
    "save_draft": ("irsurgeon.flows.standalone", "save_draft"),
    "build_head": ("irsurgeon.flows.standalone", "build_head"),
    "patch_directory": ("irsurgeon.flows.patch", "patch"),
    "Options": ("irsurgeon.draft.protocol", "Options"),
    "HubOptions": ("irsurgeon.weights.hub.fetch", "HubOptions"),  # Options.hub: a repo id's revision, token, cache
    "verify_directory": ("irsurgeon.flows.verify", "verify_directory"),
    "annotate_ir": ("irsurgeon.flows.annotate", "annotate_ir"),
    "show_path": ("irsurgeon.flows.show", "show"),
    "load_config": ("irsurgeon.families.qwen35_mtp.model", "load_config"),  # the Qwen3.5 MTP head's config
    "MTPConfig": ("irsurgeon.families.qwen35_mtp.model", "MTPConfig"),
}


def __getattr__(name: str):
    if name in _LAZY:
        module, attribute = _LAZY[name]
        return getattr(import_module(module), attribute)
    raise AttributeError(f"module 'irsurgeon' has no attribute {name!r}")


__all__ = [*_LAZY]


def __dir__() -> list[str]:
    """The public API (the lazy names above) and the version, as `dir(irsurgeon)` and completion show them."""
    return sorted([*__all__, "__version__"])


def _interrupted_early() -> None:
    """Ctrl-C before the CLI could say anything (while irsurgeon.entry or the CLI is imported): its one line, and
    with --json its one document (docs/cli.md), as the CLI itself would give them (cli._json_in_args: verify's --json
    FILE is written only by a run); exit 130. Here, where `python -m irsurgeon` finds it before importing anything."""
    try:
        print("Error: interrupted", file=sys.stderr, flush=True)
    except OSError:  # stderr is gone: the exit code still says it
        pass
    args = sys.argv[1:]
    at = next((i for i, a in enumerate(args) if not a.startswith("-")), len(args))
    command = args[at] if at < len(args) else None
    if _json_to_stdout(command, args[at + 1:]):
        import json
        try:
            print(json.dumps({"ok": False, "command": command, "result": None, "error": "interrupted",
                              "exit_code": 130}, indent=1), flush=True)
        except OSError:  # stdout is gone: the exit code still says it
            pass
    sys.exit(130)


def _json_to_stdout(command: str | None, args: list[str]) -> bool:
    """Whether `irsurgeon COMMAND ARGS...` asked for its JSON document on stdout, read from the words alone (for an
    end before click parsed them: a usage error, a Ctrl-C while importing): --json is a flag, except verify's, which
    takes an optional FILE (written only by a run)."""
    for i, arg in enumerate(args):
        if arg == "--json":
            following = args[i + 1] if i + 1 < len(args) else None
            if command != "verify" or following is None or following.startswith("-"):
                return True
    return False
