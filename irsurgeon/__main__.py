"""`python -m irsurgeon` is the `irsurgeon` command (irsurgeon.entry; a Ctrl-C while it is imported is said too)."""
from irsurgeon import _interrupted_early

try:
    from irsurgeon.entry import run
    run()
except KeyboardInterrupt:  # before run's first instruction took it (importing irsurgeon.entry)
    _interrupted_early()
