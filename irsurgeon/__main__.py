"""`python -m irsurgeon` is the `irsurgeon` command."""
from irsurgeon.entry import run

run()
