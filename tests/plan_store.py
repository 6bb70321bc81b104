"""A store for the Plan page's tests (tests/ui/test_plan_page.py, tests/e2e/test_plan.py): two
request-rate runs of llama-3.1-8b on one H100, as ``servescope bench`` stores them."""

from __future__ import annotations

import json

import pandas as pd

from store import ingest
from store.lifecycle import open_store

H100 = "H100-SXM-80GB"
#: The series' name on the page (Compare's configuration grouping).
CONFIG = "vllm · llama-3.1-8b · max_batch_size=64"


def store_series(url: str) -> None:
    """Two request-rate runs of llama-3.1-8b on one H100: 2 req/s meets interactive-chat,
    8 req/s misses it (P99 TTFT 900 ms > 500 ms)."""
    store = open_store(url)
    try:
        for rate, ttft in ((2.0, 120.0), (8.0, 900.0)):
            run_id = f"vllm-r{rate:g}"
            ingest.add_run(
                store,
                {
                    "run_id": run_id,
                    "source": "servescope",
                    "framework": "vllm",
                    "model": "llama-3.1-8b",
                    "gpu_name": H100,
                    "gpu_count": 1,
                    "precision": "bf16",
                    "arrival": "poisson",
                    "target_rate": rate,
                    "engine_params": json.dumps({"max_batch_size": 64}),
                    "started_at": 1_700_000_000.0 + rate,
                    "duration_s": 30.0,
                    "status": "completed",
                    "client_bound": False,
                },
            )
            ingest.add_requests(
                store,
                pd.DataFrame(
                    {
                        "run_id": run_id,
                        "seq": range(40),
                        "status": "ok",
                        "sent_at": [1_700_000_000.0 + i for i in range(40)],
                        "done_at": [1_700_000_003.0 + i for i in range(40)],
                        "input_tokens": 1000,
                        "output_tokens": 200,
                        "ttft_ms": ttft,
                        "tpot_ms": 20.0,
                        "e2e_ms": ttft + 200 * 20.0,
                    }
                ),
            )
    finally:
        store.dispose()
