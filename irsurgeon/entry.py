"""The `irsurgeon` command's one entry point: the console script, `python -m irsurgeon` and `python -m irsurgeon.cli`
all run `run`. Ctrl-C at any moment of the process, from its first instruction here (for `python -m`, from the
package's __init__) to its last, ends it in one line on stderr and exit code 130.

    importing     a Ctrl-C while this module or the CLI is still importing: "Error: interrupted" (this module's
                  first statement takes Ctrl-C, before its other imports: irsurgeon._take_ctrl_c; `python -m`
                  takes it earlier still, in the package's __init__)
    the command   the group turns it into its one line (cli.Group: "Error: interrupted", or that the patch is
                  complete); click's own handling (its "Aborted!" and exit 1) never sees it
    the end       once the command's work is done, a Ctrl-C is "interrupted after the command completed" (the group,
                  while it reports; here, after it has said how it ended: cli.ENDED). Then SIGINT is recorded and
                  ignored, so no handler outlives the command into interpreter shutdown (CPython would print
                  "Exception ignored ... KeyboardInterrupt" there, or die of the signal). After a command that
                  failed, its one line already said it and its exit code stands. A Ctrl-C once SIGINT is ignored
                  (the process is only exiting) changes nothing.
"""
from irsurgeon import _take_ctrl_c  # the package, loaded already (this is its module): no file is read

_take_ctrl_c()  # the first statement: a Ctrl-C from here on is one line and 130, even while this module imports

import signal  # noqa: E402  (after the handler: a Ctrl-C while it loads is taken)
import sys  # noqa: E402  (after the handler, as signal)

from irsurgeon import _give_back_ctrl_c, _interrupted_early  # noqa: E402  (after the handler, as signal)


def run() -> None:
    """The command, whichever way it was started (the console script, `python -m irsurgeon`, `python -m
    irsurgeon.cli`); exits with its code."""
    ended: list[int] = []   # the exit code the command decided (cli.ENDED), once it has said it
    late: list[int] = []    # a Ctrl-C that came after that
    code = 130
    try:
        try:
            _give_back_ctrl_c()  # a Ctrl-C is a KeyboardInterrupt again: caught below, or by the command group
            from irsurgeon.cli import ENDED, main
            ended = ENDED
            main()
        finally:
            _quiet(late)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except KeyboardInterrupt:
        _quiet(late)
        if not ended:  # before the command said anything (importing): the one line, and the document, are ours
            _interrupted_early()
        late.append(signal.SIGINT)  # after it had said its end
        code = ended[-1]
    if late and code == 0:
        from irsurgeon.cli import AFTER_COMPLETION  # imported: the command ran
        _say(f"Error: {AFTER_COMPLETION}")
        code = 130
    _forget_handled_interrupts()
    sys.exit(code)


def _forget_handled_interrupts() -> None:
    """CPython 3.11 ends a `python -m` run by killing itself with SIGINT (Modules/main.c, Py_RunMain: exit_sigint)
    when its _Py_UnhandledKeyboardInterrupt flag is set, which it sets whenever a KeyboardInterrupt leaves any code
    run through PyRun_* (pythonrun.c, run_eval_code_obj), handled later or not: a Ctrl-C a library met there would
    turn the exit code the command decided into death by the signal. Every Ctrl-C has been answered by now."""
    try:
        import ctypes
        ctypes.c_int.in_dll(ctypes.pythonapi, "_Py_UnhandledKeyboardInterrupt").value = 0
    except (ImportError, ValueError, AttributeError):  # another Python: no such flag to clear
        return


def _quiet(late: list) -> None:
    """From here a Ctrl-C is recorded into `late`, including one CPython's C handler has already caught (the
    Python-level handler is looked up when it runs), and then ignored for the rest of the process: a disposition,
    so it holds for every thread (openvino's workers included), and one CPython keeps through its shutdown (its
    signal module restores only handlers other than SIG_DFL and SIG_IGN to the default at exit, which would let a
    late SIGINT kill the process)."""
    signal.signal(signal.SIGINT, lambda signum, _frame: late.append(signum))
    _checkpoint()  # a pending Ctrl-C runs the recorder here
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _checkpoint() -> None:
    """A Python call: CPython runs pending signal handlers when one starts."""


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:  # stderr is gone (a closed pipe): the exit code still says it
        return
