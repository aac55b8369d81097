"""In the kernel: the kernel's cluster as a pure machine: the events it hears and the instructions it answers
(``events``), its phases and the one table of what each event does in each phase (``table``). No thread, lock or
I/O: the owner thread (``control.owner``) is its only caller and carries out what it answers."""
