"""Runs in the notebook's kernel: the rich views of what a cell leaves in its namespace (dask arrays, CuPy arrays)
and the parts of a task-graph summary (a graph read as layers, the layers grouped for drawing) that
``display.graph_view`` puts together."""
