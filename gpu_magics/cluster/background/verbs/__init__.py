"""In the kernel: the verbs that stand above ``cluster.lifecycle`` and act on the cluster through it, while cells run
or when the kernel ends: restarting and scaling as changes under way (``changes``), what an interrupted cell leaves
running (``interrupts``), the kernel's shutdown (``shutdown``) and what the server's idle reclaim has the kernel do
(``reclaim``). The rooms beside this folder (``background/``) sit below ``lifecycle``; nothing below imports these."""
