"""In the kernel: the verbs, one short module each (``start``, ``stop``, ``change``: restart, scale and adapt;
``free``; ``idle``: the idle timeout), and the kernel's shutdown, an interrupted cell's tasks, the idle reclaim the
server asks for."""
