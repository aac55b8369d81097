"""A worker command that never becomes a worker (``python -m tests.sleeping_worker ARGS...``): it sleeps, as a
worker whose node never comes up would, until its cluster manager stops it."""

import time

if __name__ == "__main__":
    time.sleep(3600)
