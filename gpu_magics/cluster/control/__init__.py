"""In the kernel: the control of the kernel's one cluster, above the rooms it uses (managers, background threads,
records, telemetry, workers, reading): the cluster object and its phase (``kernel_cluster``), the one thread that
changes it (``owner``), what the verbs share (``lifecycle``), the work of parking its GPU workers (``parking``), the
verbs (``verbs``: start, stop, change, free, idle, park, resume) and the questions ``gpurun`` may ask
(``queries``). Nothing below imports this folder."""
