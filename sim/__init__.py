"""The reference engine: a simulated OpenAI-compatible LLM server (framework ``sim``).

- ``sim.engine``: the scheduler (continuous batching, paged KV, chunked prefill, preemption,
  prefix caching) and ``simulate()`` for offline runs in virtual time;
- ``sim.server``: the HTTP server; ``start_in_thread(config)`` / ``serve(config)`` for tests;
- ``sim.metrics``: /metrics (vLLM v1 names, DCGM-style GPU memory);
- ``python -m sim``: ``servescope sim`` (the command is ``services.commands.sim``);
- ``sim.mockserver``: a separate loopback test rig with exact timing knobs (not the engine).

Step times come from ``analysis.perf_model``.
"""
