"""In the kernel: what it reads of its cluster. ``running`` holds the running cluster's data (what the control keeps
of it); ``inspection`` asks the scheduler (its workers, their hardware, the dashboard link); ``cluster_state`` is the
one read at the end of a verb (the workers and the manager's jobs, once) and the status view made from it."""
