"""The load generator (``servescope bench``): measures OpenAI-compatible endpoints under load.

Modules, from the wire up:

- ``http1``, ``transport``: a lean httpx transport (raw asyncio HTTP/1.1, reads timestamped);
  ``rx_stamps``: the kernel's receive timestamps those reads carry (docs/timing.md);
- ``sse``: the incremental SSE reader that times content chunks without decoding JSON;
- ``client``: request bodies and ``HttpxEndpoint`` (one ``httpx.AsyncClient``);
- ``workloads``, ``prompts``, ``arrivals``: what to send and when (seeded);
- ``engine``: the measuring loop of one process; ``worker``: its process entry point;
- ``results``: rows for the store, live statistics, the client-bound verdict;
- ``runner``: ``run_benchmark(config, store)`` — discovery, calibration, one run per level;
- ``config``: ``BenchConfig``; ``progress``: the bar.

The ``servescope bench`` command (its flags, exit codes) is ``services.commands.bench``.

This package imports nothing eagerly, so worker processes start without the store stack.
"""
