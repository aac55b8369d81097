"""Dask dashboards. ``links`` makes a scheduler's dashboard link open from the user's browser (in the kernel, and
in the Jupyter server for the side panel); ``close`` stops a dashboard on the scheduler's event loop (in the
kernel, as a cluster started there closes)."""
