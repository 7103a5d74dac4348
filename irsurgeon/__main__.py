"""`python -m irsurgeon` is the `irsurgeon` command (irsurgeon.entry; a Ctrl-C while it is imported is said too)."""
try:
    from irsurgeon.entry import run
except KeyboardInterrupt:
    import sys
    print("Error: interrupted", file=sys.stderr)
    sys.exit(130)

run()
