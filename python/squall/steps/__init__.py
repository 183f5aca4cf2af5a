"""``squall steps``: which rank, node and section slows a job down (docs/why-is-my-job-slow.md).

``model`` (the records), ``files`` (the per-rank files squall_steps writes), ``verdict``
(pure: the records to a verdict and per-rank figures), ``plot`` (the heat map), ``follow``
(the live lines)."""
