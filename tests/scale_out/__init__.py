"""Many durable workers on one database: the scale-out tests (``test_many_workers``) and the
worker process they and ``benchmarks/scale_out.py`` start (``worker``)."""
