"""irsurgeon: graph surgery on OpenVINO IR.

Public API (openvino is imported on first use, so `import irsurgeon` and the CLI start fast):
    build_mtp_model, save_draft   the Qwen3.5 MTP head from safetensors, and writing it
    build_head                        build -> compress -> KV-cache precision -> save, as `build-mtp` does
    patch_directory, Options          make an exported directory ready for a draft of any family in place
                                      (irsurgeon.flows.patch.patch); HubOptions: revision, token, cache for a repo id
    verify_directory                  the contract checks of a directory, one (name, ok, detail) per check
    verify_genai, Verification        `verify --genai` in Python: the checks, then openvino-genai's equivalence,
                                      acceptance and speed; its result, field for field the command's --json result
    annotate_ir, show_path            hidden-state annotation; what an IR or directory holds (irsurgeon.flows.show.show)
    load_config, MTPConfig            the head's configuration from config.json
    IRSurgeonError                    the base of every error irsurgeon raises on purpose
No exported name is also a submodule's: `irsurgeon.flows.patch` and `irsurgeon.flows.show` are the modules, always.
"""
import sys

# The command's Ctrl-C comes first: when this process is `python -m irsurgeon` or `python -m irsurgeon.cli`, this
# package is the first of irsurgeon's code to run (before their __main__), and its first instructions take Ctrl-C.
# Anything else that imports irsurgeon (a program, a test) keeps its own handler: _take_ctrl_c only runs for the command.


def _take_ctrl_c() -> None:
    """From here a Ctrl-C ends the process as the command's own end before it could say anything (_interrupted_early:
    one line, with --json one document, exit 130), wherever Python is (an import, a module's top level): raised as
    SystemExit, which needs no handler above it. irsurgeon.entry.run hands Ctrl-C back to Python's KeyboardInterrupt
    (_give_back_ctrl_c) once it can catch one. Kept off when SIGINT is not Python's default handler (ignored by `nohup`
    or a shell's `&`, or a host's own) or this is not the main thread. `_signal` is the C module Python loaded at
    start-up: no import runs for it."""
    import _signal
    try:
        if _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
            _signal.signal(_signal.SIGINT, _ctrl_c_before_the_command)
    except ValueError:  # not the main thread: signals are the host's
        return


def _ctrl_c_before_the_command(_signum, _frame) -> None:
    import _signal
    _signal.signal(_signal.SIGINT, _signal.SIG_IGN)  # the process is ending: a second Ctrl-C adds no second line
    _interrupted_early()


def _give_back_ctrl_c() -> None:
    """Ctrl-C raises KeyboardInterrupt again (Python's own handler), if _take_ctrl_c took it."""
    import _signal
    if _signal.getsignal(_signal.SIGINT) is _ctrl_c_before_the_command:
        _signal.signal(_signal.SIGINT, _signal.default_int_handler)


def _run_as_module() -> str | None:
    """The module `python -m NAME` runs, while Python still imports its packages (sys.argv[0] is "-m" only then:
    runpy sets it to the module's file once the packages are imported); None otherwise. From sys.orig_argv (3.10+)."""
    if sys.argv[:1] != ["-m"]:
        return None
    for i, word in enumerate(sys.orig_argv[1:-1], 1):
        if word == "-m":
            return sys.orig_argv[i + 1]
        if word.startswith("-m") and len(word) > 2:
            return word[2:]
    return None


def _interrupted_early() -> None:
    """Ctrl-C before the CLI could say anything (while irsurgeon.entry or the CLI is imported): its one line, and
    with --json its one document (docs/cli.md), as the CLI itself would give them (_words); exit 130. Here, where
    the command's first instructions find it (_take_ctrl_c)."""
    try:
        print("Error: interrupted", file=sys.stderr, flush=True)
    except OSError:  # stderr is gone: the exit code still says it
        pass
    command, to_stdout = _words(sys.argv[1:])
    if to_stdout:  # as json.dumps(indent=1) writes it, without importing json: this may run while json is imported
        named = "null" if command is None else f'"{command}"'  # one of _COMMANDS: nothing to escape
        try:
            print(f'{{\n "ok": false,\n "command": {named},\n "result": null,\n "error": "interrupted",\n'
                  f' "exit_code": 130\n}}', flush=True)
        except OSError:  # stdout is gone: the exit code still says it
            pass
    sys.exit(130)


# The commands' names (cli.main's; tests/test_entry_points.py holds them equal), for a document said before click has
# read the words: its `command` is one of them, or null (docs/cli.md's schema).
_COMMANDS = ("patch", "verify", "tune", "build-mtp", "annotate", "show", "synth")


def _words(words: list[str]) -> tuple[str | None, bool]:
    """What `irsurgeon WORDS...` names, read from the words alone (an end before click parsed them: a usage error,
    a Ctrl-C while importing): its command (the first word that is no option, when it is a command; else None) and
    whether its JSON document goes to stdout (_json_to_stdout, or --json before the command: cli.Group moves it)."""
    at = next((i for i, word in enumerate(words) if not word.startswith("-")), len(words))
    named = words[at] if at < len(words) else None
    command = named if named in _COMMANDS else None
    return command, "--json" in words[:at] or _json_to_stdout(named, words[at + 1:])


def _json_to_stdout(command: str | None, args: list[str]) -> bool:
    """Whether `irsurgeon COMMAND ARGS...` asked for its JSON document on stdout, read from the words alone: --json is
    a flag, except verify's, which takes an optional FILE (written only by a run), unless the word after it is the
    only word that can be verify's TARGET (_verify_json_target: option order never matters)."""
    for i, arg in enumerate(args):
        if arg in ("--json", "--json=-"):
            following = args[i + 1] if i + 1 < len(args) else None
            if command != "verify" or arg == "--json=-" or following is None or following.startswith("-"):
                return True
    return command == "verify" and _verify_json_target(args) is not None


def _verify_json_target(args: list[str]) -> int | None:
    """The index of `--json` in verify's ARGS when the word after it is verify's TARGET, not its FILE: it is the only
    word that can be TARGET (`irsurgeon verify --json DIR`: the document goes to stdout, as `verify DIR --json`).
    Read as click's parser reads them: an option other than verify's flags takes the next word as its value (or its
    own after `=`); --json takes the next word unless it looks like an option; after `--` every word is an argument."""
    flags = ("--genai", "-h", "--help")  # verify's options that take no value (tests/test_entry_points.py checks them)
    free, json_at, i = 0, None, 0
    while i < len(args):
        word = args[i]
        if word == "--":
            free += len(args) - i - 1
            break
        if word == "--json" and i + 1 < len(args) and not (args[i + 1].startswith("-") and len(args[i + 1]) > 1):
            json_at, i = i, i + 2
            continue
        if word.startswith("-") and len(word) > 1:
            i += 1 if word in flags or "=" in word or word == "--json" else 2
            continue
        free, i = free + 1, i + 1
    return json_at if free == 0 else None


if _run_as_module() in ("irsurgeon", "irsurgeon.cli"):
    _take_ctrl_c()

from importlib import import_module  # noqa: E402  (after Ctrl-C is taken: the command's first instructions are above)

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
    "verify_genai": ("irsurgeon.flows.readiness", "verify_genai"),
    "Verification": ("irsurgeon.flows.readiness", "Verification"),  # what verify_genai returns
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
