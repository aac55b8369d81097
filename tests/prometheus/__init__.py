"""A real Prometheus (Debian's package, ``setup.sh``) and what it scrapes, for the ``/metrics`` tests."""
