"""What the user types and reads, below everything else and in every process: a magic's line parsed
(``argparsing``), bytes and durations and the one-line error (``units``), the package's own error types
(``errors``), the commands a hint suggests (``hints``), a line said in the notebook (``said``)."""
