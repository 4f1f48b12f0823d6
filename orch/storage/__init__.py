"""Buckets: one small store interface per storage service (``base.py``), the errors they
map their services' codes to (``errors.py``), and one module per store. Plain Python, no
Temporal: activities call these, as they call ``orch/clouds``."""
