"""The plain-cell session, in the kernel: ``%gpurun BACKEND`` as a line runs every following plain cell on that
backend (``plain_cells``), reusing the ``%%gpurun`` engine's plans; ``placement`` says in words where plain cells
and arrays are computed as the session stands."""
