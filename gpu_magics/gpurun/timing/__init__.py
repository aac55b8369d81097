"""Where a cell's time went: the tasks it ran (``task_count``, with its scheduler plugin), the split of its wall
time (``time_split``), and the advice drawn from it (``advice``)."""
