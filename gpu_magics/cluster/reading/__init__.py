"""In the kernel: what it reads of its cluster. ``inspection`` asks the scheduler (its workers, their hardware,
the dashboard link); ``cluster_state`` is the one read at the end of a verb (the workers and the manager's jobs, once)
and the status view made from it; ``answers``: what the verbs that change nothing answer (status, dashboard, the
cluster a verb requires)."""
