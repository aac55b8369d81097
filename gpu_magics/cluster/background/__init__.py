"""In the kernel: what goes on in threads of its own while cells run, below the control (``cluster.control``): a
start, restart or scale under way and its line (``starting``), the log file distributed writes to meanwhile
(``start_logs``), the imports ``%load_ext`` begins (``ahead``), a close in the background (``closing``), the idle
timeout (``idle``), interrupts that a scheduler here must not swallow (``kept_interrupts``)."""
