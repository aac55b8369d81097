"""The ``%%gpurun`` engine: options, backends (every backend rule), executing a cell, results, the cell's
monitor and task counting."""
