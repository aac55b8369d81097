"""In the kernel: what stops work or the cluster other than ``%gpucluster stop``: the idle timeout (``idle``), the
kernel's shutdown (``shutdown``), and the tasks an interrupted cell leaves running (``interrupts``)."""
