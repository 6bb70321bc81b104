"""What collects: the measurements and series ServeScope stores, and nothing that drives them.

- ``loadgen``: the load generator (``run_benchmark(config, store)``);
- ``importers``: other benchmark tools' result files, parsed and recomputed;
- ``engine_metrics``, ``prometheus_text``: engine ``/metrics`` pages, normalised;
- ``gpu``: NVML and DCGM exporter samples; ``prometheus``: series from a Prometheus server;
- ``watch``: the watcher loop that scrapes them on an interval;
- ``row_sink``: the one interface collectors hand their rows to; ``redact``: credentials out of
  every message.

The commands that drive them (``servescope bench``, ``import``, ``watch``, ``demo``) live in
``services.commands``; this package imports neither ``services`` nor ``ui``.
"""
