"""In the Jupyter server process: what kernels that have ended left on the server's GPUs, and ending it on request.

``registry`` records every process each running kernel started (its descendants, by pid and start time), ``watch``
does so every few seconds on the server's event loop (``/proc`` read on a worker thread), ``store`` keeps the record
for the next server in the runtime directory, and a process that outlives
its kernel and holds GPU memory (NVML's process list) is a leftover: listed at ``api/leftovers``, counted on
``/metrics``, ended by ``POST api/leftovers/end`` only where its pid still names the process recorded, of this user.
"""
