"""`python -m aocsim`: the same command as `aocsim`."""

from aocsim.cli import main

main(prog_name="aocsim")
