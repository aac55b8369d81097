"""In the kernel: the control of the kernel's one cluster, above the rooms it uses (managers, background threads,
records, telemetry, workers, reading): the cluster object and its phase (``kernel_cluster``), the one thread that
changes it (``owner``), what the verbs share (``lifecycle``), parking its GPU workers (``parking``), the verbs
(``verbs``: start, stop, change, free, idle) and the questions ``gpurun`` may ask (``queries``). Nothing below
imports this folder."""
