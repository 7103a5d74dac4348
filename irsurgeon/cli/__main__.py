"""`python -m irsurgeon.cli` is the `irsurgeon` command, through irsurgeon.entry.run as every entry (Ctrl-C: the
package's __init__ takes it before this package imports the CLI)."""
from irsurgeon import _interrupted_early

try:
    from irsurgeon.entry import run
    run()
except KeyboardInterrupt:  # before run's first instruction took it (importing irsurgeon.entry)
    _interrupted_early()
