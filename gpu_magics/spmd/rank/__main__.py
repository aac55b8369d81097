"""``python -m gpu_magics.spmd.rank FD``: a rank process (see ``repl``)."""

import sys

from gpu_magics.spmd.rank.repl import main

main(sys.argv)
