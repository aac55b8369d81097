"""In the kernel: what happens to the cluster while cells run: its start in the background (``starting``, the log
file distributed writes to meanwhile: ``start_logs``, the imports ``%load_ext`` begins: ``ahead``), and what stops
work or the cluster other than ``%gpucluster stop``: the idle timeout (``idle``), the kernel's shutdown
(``shutdown``), and the tasks an interrupted cell leaves running (``interrupts``)."""
