"""In the kernel: what happens to the cluster while cells run, below ``lifecycle``: its start in the background
(``starting``, the log file distributed writes to meanwhile: ``start_logs``, the imports ``%load_ext`` begins:
``ahead``), a close in the background (``closing``), the idle timeout (``idle``), the one thread that changes the
cluster's state (``owner``) and what letting a cluster go takes (``release``). The verbs above ``lifecycle``
(restart and scale under way, the kernel's shutdown, an interrupted cell's tasks, the idle reclaim) are in
``verbs/``."""
