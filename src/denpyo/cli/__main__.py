"""`python -m denpyo.cli`: the same as the `denpyo` command."""

from denpyo.cli import main

main(prog_name="denpyo")
