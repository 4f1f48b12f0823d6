"""What crosses the boundary between workflows and activities: each activity's name and
the records it takes and returns, one module per group of activities. Workflows call
activities by these names and import nothing from ``activities/`` (which implements
them), as ``orch/semaphore.py`` does for the launch semaphore."""
