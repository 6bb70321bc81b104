"""SQLAlchemy Core tables: the whole schema, one place.

Units (DESIGN §4): instants are DOUBLE seconds since the Unix epoch (UTC), durations
DOUBLE milliseconds (``*_ms``), memory bytes (``*_bytes``), ratios 0..1. JSON is stored as
text so that DuckDB and PostgreSQL read it the same way.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

DOUBLE: sa.Double[float] = sa.Double()

schema_version = sa.Table(
    "schema_version",
    metadata,
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("applied_at", DOUBLE, nullable=False),
)

#: Facts about the store itself (key → value): ``store_id``, a random id given by migration 4,
#: names this store whatever URL or path reaches it (spooled batches record it, store.ingest).
store_meta = sa.Table(
    "store_meta",
    metadata,
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

runs = sa.Table(
    "runs",
    metadata,
    sa.Column("run_id", sa.Text, primary_key=True),
    sa.Column("name", sa.Text),
    sa.Column("source", sa.Text, nullable=False),  # servescope, vllm-bench, sglang-bench, ...
    sa.Column("source_file", sa.Text),
    sa.Column("source_sha256", sa.Text),
    sa.Column("framework", sa.Text),
    sa.Column("framework_version", sa.Text),
    sa.Column("model", sa.Text),
    sa.Column("gpu_name", sa.Text),
    sa.Column("gpu_count", sa.Integer),
    sa.Column(
        "precision", sa.Text
    ),  # weights: bf16 | fp16 | fp8 | int8 | int4 | gptq | awq | gguf-q4_k_m ... (migration 5)
    sa.Column("kv_cache_dtype", sa.Text),  # auto | fp16 | bf16 | fp8 | int8 (migration 5)
    sa.Column("endpoint", sa.Text),  # never credentials
    sa.Column("api", sa.Text),  # chat | completions
    sa.Column("host", sa.Text),  # the client host that measured
    sa.Column("workload", sa.Text),
    sa.Column("arrival", sa.Text),  # concurrency | constant | poisson | gamma | trace
    sa.Column("target_rate", DOUBLE),  # requests/s; NULL for closed loop / infinite
    sa.Column("burstiness", DOUBLE),
    sa.Column("concurrency", sa.Integer),
    sa.Column("engine_params", sa.Text),  # JSON, normalised keys
    sa.Column("client_params", sa.Text),  # JSON
    sa.Column("sweep_id", sa.Text),
    sa.Column("started_at", DOUBLE),
    sa.Column("ended_at", DOUBLE),
    sa.Column("duration_s", DOUBLE),
    sa.Column("status", sa.Text),  # running | completed | interrupted | failed
    sa.Column("client_bound", sa.Boolean),
    sa.Column("client_bound_reason", sa.Text),
    sa.Column("achieved_rate", DOUBLE),  # requests sent / s
    sa.Column("output_tokens_estimated", sa.Boolean),
    sa.Column("tool_summary", sa.Text),  # JSON: the tool's own aggregates
    sa.Column("notes", sa.Text),
    sa.Column("tags", sa.Text),  # JSON list
    sa.Column("created_at", DOUBLE),
    # bumped in the transaction that writes any of the run's requests or token gaps
    # (migration 3); stored rollups are valid only for the version they were computed at
    sa.Column("data_version", sa.BigInteger, server_default="0"),
)

requests = sa.Table(
    "requests",
    metadata,
    sa.Column("run_id", sa.Text, primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("scheduled_at", DOUBLE),
    sa.Column("sent_at", DOUBLE),
    sa.Column("first_token_at", DOUBLE),
    sa.Column("done_at", DOUBLE),
    sa.Column("input_tokens", sa.Integer),
    sa.Column("output_tokens", sa.Integer),
    sa.Column("cached_tokens", sa.Integer),
    sa.Column("ttft_ms", DOUBLE),
    sa.Column("tpot_ms", DOUBLE),
    sa.Column("e2e_ms", DOUBLE),
    sa.Column("lag_ms", DOUBLE),  # client lag: sent_at - scheduled_at
    sa.Column("status", sa.Text, nullable=False),  # ok | error | timeout | cancelled
    sa.Column("http_status", sa.Integer),
    sa.Column("error", sa.Text),
    sa.Column("finish_reason", sa.Text),
    sa.Column("conversation_id", sa.Text),
    sa.Column("turn", sa.Integer),
    sa.Column("output_tokens_estimated", sa.Boolean),
    sa.Column("chunks", sa.Integer),  # streamed content chunks
    # the client host that sent it (migration 8): a run made by several hosts (bench --shard)
    # has rows of each; NULL for imported runs
    sa.Column("host", sa.Text),
)

#: One host's share of a run made by several hosts (``bench --shard I/N``, migration 8):
#: written by ``store.run_shards`` as the hosts join, agree on a start, heartbeat and finish.
#: Instants ``joined_at``, ``start_at`` and ``heartbeat_at`` are on the database's clock;
#: ``started_at``/``ended_at`` (the host's first send, last completion) on the host's own, which
#: is ``clock_offset_ms`` behind the database's (± ``clock_rtt_ms`` / 2).
run_shards = sa.Table(
    "run_shards",
    metadata,
    sa.Column("run_id", sa.Text, primary_key=True),
    sa.Column("shard", sa.Integer, primary_key=True, autoincrement=False),  # 0-based
    sa.Column("shards", sa.Integer, nullable=False),
    sa.Column("host", sa.Text, nullable=False),
    # joined | ready | running | completed | interrupted | failed
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("joined_at", DOUBLE),
    sa.Column("start_at", DOUBLE),  # the agreed common start (the same on every shard)
    sa.Column("started_at", DOUBLE),
    sa.Column("ended_at", DOUBLE),
    sa.Column("heartbeat_at", DOUBLE),
    sa.Column("requests", sa.Integer),
    sa.Column("ok", sa.Integer),
    sa.Column("errors", sa.Integer),
    sa.Column("client_bound", sa.Boolean),
    sa.Column("reason", sa.Text),  # why client-bound
    sa.Column("clock_offset_ms", DOUBLE),  # database clock − host clock
    sa.Column("clock_rtt_ms", DOUBLE),
    sa.Column("summary", sa.Text),  # JSON: the host's own tool summary and run fields
    sa.Column("error", sa.Text),  # why it failed
)

token_gaps = sa.Table(
    "token_gaps",
    metadata,
    sa.Column("run_id", sa.Text, primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("idx", sa.Integer, primary_key=True),
    sa.Column("gap_ms", DOUBLE, nullable=False),
)

gpu_samples = sa.Table(
    "gpu_samples",
    metadata,
    sa.Column("host", sa.Text, primary_key=True),
    sa.Column("gpu_index", sa.Integer, primary_key=True),
    sa.Column("ts", DOUBLE, primary_key=True),
    sa.Column("gpu_uuid", sa.Text),
    sa.Column("gpu_name", sa.Text),
    sa.Column("mem_used_bytes", DOUBLE),
    sa.Column("mem_total_bytes", DOUBLE),
    sa.Column("mem_reserved_bytes", DOUBLE),  # migration 2
    sa.Column("util_gpu", DOUBLE),
    sa.Column("util_mem", DOUBLE),
    sa.Column("power_w", DOUBLE),
    sa.Column("temp_c", DOUBLE),
    sa.Column("sm_clock_mhz", DOUBLE),
    sa.Column("source", sa.Text),  # nvml | dcgm | sim
)

gpu_process_samples = sa.Table(
    "gpu_process_samples",
    metadata,
    sa.Column("host", sa.Text, primary_key=True),
    sa.Column("gpu_index", sa.Integer, primary_key=True),
    sa.Column("ts", DOUBLE, primary_key=True),
    sa.Column("pid", sa.Integer, primary_key=True),
    sa.Column("process_name", sa.Text),
    sa.Column("used_bytes", DOUBLE),
)

engine_samples = sa.Table(
    "engine_samples",
    metadata,
    sa.Column("target", sa.Text, primary_key=True),
    sa.Column("ts", DOUBLE, primary_key=True),
    sa.Column("metric", sa.Text, primary_key=True),
    sa.Column("engine", sa.Text),
    sa.Column("value", DOUBLE),
)

engine_raw_samples = sa.Table(
    "engine_raw_samples",
    metadata,
    sa.Column("target", sa.Text, primary_key=True),
    sa.Column("ts", DOUBLE, primary_key=True),
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("labels", sa.Text, primary_key=True),  # canonical JSON of the label set
    sa.Column("value", DOUBLE),
)

sweeps = sa.Table(
    "sweeps",
    metadata,
    sa.Column("sweep_id", sa.Text, primary_key=True),
    sa.Column("name", sa.Text),
    sa.Column("engine", sa.Text),
    sa.Column("launch_template", sa.Text),
    sa.Column("grid", sa.Text),  # JSON
    sa.Column("workload", sa.Text),
    sa.Column("slo", sa.Text),
    sa.Column("status", sa.Text),  # running | completed | interrupted | failed
    sa.Column("created_at", DOUBLE),
    sa.Column("spec", sa.Text),  # JSON: the whole sweep spec as run (migration 6)
    sa.Column("mode", sa.Text),  # grid | efficient (migration 6)
    sa.Column("started_at", DOUBLE),  # migration 6
    sa.Column("ended_at", DOUBLE),  # migration 6
    sa.Column("host", sa.Text),  # migration 6
    # the sweep process (pid and its start as /proc reports it): is it still running? (mig. 9)
    sa.Column("runner_pid", sa.BigInteger),
    sa.Column("runner_start", DOUBLE),
)

sweep_points = sa.Table(
    "sweep_points",
    metadata,
    sa.Column("sweep_id", sa.Text, primary_key=True),
    sa.Column("point_id", sa.Text, primary_key=True),  # stable: a hash of the params
    sa.Column("repeat", sa.Integer, primary_key=True, autoincrement=False),  # 0, 1, …
    sa.Column("params", sa.Text, nullable=False),  # JSON, normalised engine-parameter keys
    # pending | running | completed | failed_to_start | health_timeout | crashed | oom |
    # interrupted | pruned (sample-efficient mode: could not beat the incumbent)
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("launch_command", sa.Text),  # the full command as launched (no credentials)
    sa.Column("framework", sa.Text),
    sa.Column("framework_version", sa.Text),
    sa.Column("started_at", DOUBLE),
    sa.Column("ended_at", DOUBLE),
    sa.Column("capacity", DOUBLE),  # SLO capacity found (req/s or concurrency)
    sa.Column("capacity_kind", sa.Text),  # rate | concurrency
    sa.Column("capacity_interpolated", sa.Boolean),
    sa.Column("capacity_note", sa.Text),
    sa.Column("runs_used", sa.Integer),  # load levels measured for this point
    sa.Column("search", sa.Text),  # JSON list: {load, run_id, passed, ratio} in measured order
    sa.Column("peak_memory_fraction", DOUBLE),  # peak GPU memory used / total over its runs
    sa.Column("preemptions", DOUBLE),  # preemptions per 1,000 requests at capacity
    sa.Column("prior", DOUBLE),  # the performance model's predicted capacity (efficient mode)
    sa.Column("error", sa.Text),  # why it failed (one line)
    sa.Column("log_tail", sa.Text),  # the engine's last log lines
    # migration 9: the attempt measured in this row (1, 2, … : a resume starts a new one with
    # its own runs), the earlier attempts kept (JSON list: attempt, status, started_at,
    # ended_at, error, run_ids, launch_command, log_tail), and the engine's process group with
    # its leader's start (a killed sweep's engine is stopped by --resume / --cleanup)
    sa.Column("attempt", sa.Integer),
    sa.Column("attempts", sa.Text),
    sa.Column("engine_pgid", sa.BigInteger),
    sa.Column("engine_start", DOUBLE),
)

# --- Plan (migration 7) ---------------------------------------------------------------------------

gpu_prices = sa.Table(
    # what the user pays per GPU-hour (never seeded: prices are the user's, set on Plan)
    "gpu_prices",
    metadata,
    sa.Column("gpu", sa.Text, primary_key=True),  # gpus.name
    sa.Column("usd_per_hour", DOUBLE, nullable=False),
    sa.Column("note", sa.Text),  # e.g. "3-year reserved, provider X"
    sa.Column("updated_at", DOUBLE),
    sa.Column("updated_by", sa.Text),
)

plans = sa.Table(
    # a saved capacity plan: its inputs (the result is recomputed from them on read)
    "plans",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("spec", sa.Text, nullable=False),  # JSON: the plan's inputs (services/views/plan)
    sa.Column("created_at", DOUBLE),
    sa.Column("updated_at", DOUBLE),
    sa.Column("created_by", sa.Text),
)

run_rollups = sa.Table(
    # results computed from a run's rows (its summary, per-bucket percentiles, ...), kept so a
    # cold dashboard does not re-aggregate millions of rows; see store.rollups (migration 3)
    "run_rollups",
    metadata,
    sa.Column("run_id", sa.Text, primary_key=True),
    sa.Column("kind", sa.Text, primary_key=True),  # e.g. run_stats, bucket_latency
    sa.Column("params", sa.Text, primary_key=True),  # canonical JSON of the read's arguments
    sa.Column("data_version", sa.BigInteger, nullable=False),  # runs.data_version it reflects
    sa.Column("payload", sa.LargeBinary, nullable=False),  # Arrow IPC stream of the result
    sa.Column("computed_at", DOUBLE),
    sa.Column("compute_ms", DOUBLE),  # what it cost to compute (what the rollup saves)
)

# --- catalog (seeded idempotently from seeds/*.toml; rows with origin='user' are never reseeded)


def _catalog_columns() -> list[sa.Column[object]]:
    return [
        sa.Column("origin", sa.Text, nullable=False),  # seed | user
        sa.Column("seed_hash", sa.Text),  # hash of the seed entry last applied
        sa.Column("source", sa.Text),  # where the figures come from
        sa.Column("updated_at", DOUBLE),
    ]


gpus = sa.Table(
    "gpus",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),  # e.g. H100-SXM-80GB
    sa.Column("display_name", sa.Text),
    sa.Column("memory_bytes", DOUBLE),
    sa.Column("bandwidth_bytes_s", DOUBLE),
    sa.Column("bf16_tflops", DOUBLE),
    sa.Column("fp8_tflops", DOUBLE),
    sa.Column("sm_count", sa.Integer),
    sa.Column("tdp_w", DOUBLE),
    # migration 7 (Plan): gpu | cpu (a CPU-only host: memory = system RAM, bandwidth = DRAM's,
    # *_tflops = its vector/matrix peak) | edge (a system-on-module sharing DRAM with its CPU)
    sa.Column("kind", sa.Text),
    sa.Column("vendor", sa.Text),  # NVIDIA | AMD | Intel | ...
    sa.Column("int8_tops", DOUBLE),  # dense INT8 tensor peak (TOPS); 0 where none
    sa.Column("link_bytes_s", DOUBLE),  # one-way GPU-GPU bandwidth (NVLink / Infinity Fabric)
    sa.Column("checked_on", sa.Text),  # YYYY-MM-DD the figures were checked against the source
    *_catalog_columns(),
)

models = sa.Table(
    "models",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),  # e.g. llama-3.1-8b
    sa.Column("hf_repo", sa.Text),
    sa.Column("params_b", DOUBLE),
    sa.Column("active_params_b", DOUBLE),
    sa.Column("layers", sa.Integer),
    sa.Column("hidden_size", sa.Integer),
    sa.Column("heads", sa.Integer),
    sa.Column("kv_heads", sa.Integer),
    sa.Column("head_dim", sa.Integer),
    sa.Column("vocab_size", sa.Integer),
    sa.Column("context", sa.Integer),
    sa.Column("dtype_bytes", DOUBLE),
    # migration 7 (Plan): analysis.capacity.ModelShape's attention / MLA / MoE fields
    sa.Column("attention", sa.Text),  # mha | gqa | mla
    sa.Column("kv_lora_rank", sa.Integer),  # MLA latent KV dimension (DeepSeek-V3: 512)
    sa.Column("qk_rope_head_dim", sa.Integer),  # MLA decoupled RoPE key (DeepSeek-V3: 64)
    sa.Column("experts", sa.Integer),  # routed experts per MoE layer (0: dense)
    sa.Column("experts_per_token", sa.Integer),  # top-k
    sa.Column("shared_experts", sa.Integer),
    sa.Column("expert_params_b", DOUBLE),  # one routed expert, summed over MoE layers (billions)
    sa.Column("expert_dtype_bytes", DOUBLE),  # routed experts' bytes/param when not dtype_bytes
    sa.Column("checked_on", sa.Text),
    *_catalog_columns(),
)

slo_profiles = sa.Table(
    "slo_profiles",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("description", sa.Text),
    sa.Column("percentile", DOUBLE),  # e.g. 99
    sa.Column("ttft_ms", DOUBLE),
    sa.Column("tpot_ms", DOUBLE),
    sa.Column("e2e_ms", DOUBLE),
    sa.Column("max_error_rate", DOUBLE),
    sa.Column("spec", sa.Text),  # JSON: the full profile (extra targets of later features)
    *_catalog_columns(),
)

workloads = sa.Table(
    "workloads",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("description", sa.Text),
    sa.Column("spec", sa.Text),  # JSON: length distributions, prefix, turns
    *_catalog_columns(),
)

# --- the framework evaluation checklist (migration 5) -----------------------------------------

frameworks = sa.Table(
    "frameworks",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),  # e.g. vllm (the runs.framework value)
    sa.Column("display_name", sa.Text),
    sa.Column("repo", sa.Text),  # GitHub owner/name, for project health
    sa.Column("homepage", sa.Text),
    sa.Column("licence", sa.Text),
    sa.Column("spec", sa.Text),  # JSON: the full entry (aliases, serve command, notes)
    *_catalog_columns(),
)

criteria = sa.Table(
    "criteria",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),  # e.g. memory_management
    sa.Column("display_name", sa.Text),
    sa.Column("category", sa.Text),
    sa.Column("description", sa.Text),
    sa.Column("kind", sa.Text),  # checklist (scored in scores.toml) | measured (fed from the store)
    sa.Column("spec", sa.Text),  # JSON: the full entry (the checklist items, must-have tags)
    *_catalog_columns(),
)

framework_scores = sa.Table(
    "framework_scores",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),  # "<framework>/<criterion>"
    sa.Column("framework", sa.Text, nullable=False),
    sa.Column("criterion", sa.Text, nullable=False),
    sa.Column("score", DOUBLE, nullable=False),  # 0..5
    sa.Column("evidence", sa.Text, nullable=False),  # one line
    sa.Column("source_url", sa.Text, nullable=False),  # the project's own docs / release notes
    sa.Column("checked_on", sa.Text, nullable=False),  # ISO date the evidence was checked
    sa.Column("tags", sa.Text),  # JSON list: capabilities a must-have filter can ask for
    sa.Column("updated_by", sa.Text),
    *_catalog_columns(),
)

framework_score_edits = sa.Table(
    "framework_score_edits",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),  # "<framework>/<criterion>"
    sa.Column("edited_at", DOUBLE, primary_key=True),
    sa.Column("framework", sa.Text, nullable=False),
    sa.Column("criterion", sa.Text, nullable=False),
    sa.Column("score", DOUBLE),
    sa.Column("evidence", sa.Text),
    sa.Column("source_url", sa.Text),
    sa.Column("checked_on", sa.Text),
    sa.Column("tags", sa.Text),
    sa.Column("previous", sa.Text),  # JSON: the row as it was before the edit
    sa.Column("edited_by", sa.Text),
)

weight_presets = sa.Table(
    "weight_presets",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("description", sa.Text),
    sa.Column("spec", sa.Text),  # JSON: {weights: {criterion: w}, must_have: [tag, ...]}
    *_catalog_columns(),
)

CATALOG_TABLES: dict[str, sa.Table] = {
    "gpus": gpus,
    "models": models,
    "slo_profiles": slo_profiles,
    "workloads": workloads,
    "frameworks": frameworks,
    "criteria": criteria,
    "framework_scores": framework_scores,
    "weight_presets": weight_presets,
}

# --- evidence measured on the user's endpoints (migration 5) ----------------------------------

verifications = sa.Table(
    "verifications",
    metadata,
    sa.Column("verify_id", sa.Text, primary_key=True),
    sa.Column("endpoint", sa.Text, nullable=False),  # never credentials
    sa.Column("api", sa.Text),  # chat | completions | both
    sa.Column("model", sa.Text),
    sa.Column("framework", sa.Text),
    sa.Column("framework_version", sa.Text),
    sa.Column("identity_source", sa.Text),  # which probe named the framework
    sa.Column("host", sa.Text),
    sa.Column("started_at", DOUBLE),
    sa.Column("duration_s", DOUBLE),
    sa.Column("passed", sa.Integer),
    sa.Column("failed", sa.Integer),
)

verification_checks = sa.Table(
    "verification_checks",
    metadata,
    sa.Column("verify_id", sa.Text, primary_key=True),
    sa.Column("check_name", sa.Text, primary_key=True),
    sa.Column("api", sa.Text),
    sa.Column("passed", sa.Boolean, nullable=False),
    sa.Column("sent", sa.Text),  # what was sent (abridged)
    sa.Column("received", sa.Text),  # what came back (abridged)
    sa.Column("message", sa.Text),  # why it passed or failed
    sa.Column("why_it_matters", sa.Text),
    sa.Column("duration_ms", DOUBLE),
)

quality_runs = sa.Table(
    "quality_runs",
    metadata,
    sa.Column("quality_id", sa.Text, primary_key=True),
    sa.Column("prompt_set", sa.Text),
    sa.Column("prompt_set_sha256", sa.Text),
    sa.Column("reference_endpoint", sa.Text),
    sa.Column("reference_model", sa.Text),
    sa.Column("reference_framework", sa.Text),
    sa.Column("reference_version", sa.Text),
    sa.Column("reference_precision", sa.Text),
    sa.Column("candidate_endpoint", sa.Text),
    sa.Column("candidate_model", sa.Text),
    sa.Column("candidate_framework", sa.Text),
    sa.Column("candidate_version", sa.Text),
    sa.Column("candidate_precision", sa.Text),
    sa.Column("started_at", DOUBLE),
    sa.Column("duration_s", DOUBLE),
    sa.Column("prompts", sa.Integer),
    sa.Column("summary", sa.Text),  # JSON: accuracies, agreement, similarity, each with its CI
)

quality_answers = sa.Table(
    "quality_answers",
    metadata,
    sa.Column("quality_id", sa.Text, primary_key=True),
    sa.Column("prompt_id", sa.Text, primary_key=True),
    sa.Column("category", sa.Text),
    sa.Column("reference_answer", sa.Text),
    sa.Column("candidate_answer", sa.Text),
    sa.Column("reference_correct", sa.Boolean),
    sa.Column("candidate_correct", sa.Boolean),
    sa.Column("agree", sa.Boolean),
    sa.Column("similarity", DOUBLE),  # token-overlap F1, 0..1
    sa.Column("reference_error", sa.Text),
    sa.Column("candidate_error", sa.Text),
)

project_health = sa.Table(
    "project_health",
    metadata,
    sa.Column("framework", sa.Text, primary_key=True),
    sa.Column("fetched_at", DOUBLE, primary_key=True),
    sa.Column("repo", sa.Text, nullable=False),
    sa.Column("releases_12m", sa.Integer),
    sa.Column("median_days_between_releases", DOUBLE),
    sa.Column("median_first_response_h", DOUBLE),  # to the first maintainer comment
    sa.Column("issues_sampled", sa.Integer),
    sa.Column("latest_release", sa.Text),
    sa.Column("latest_release_at", DOUBLE),
    sa.Column("detail", sa.Text),  # JSON: what was counted, for the page's tooltip
)

# column order of the bulk-write tables (the ingest fast paths rely on it)
REQUEST_COLUMNS: tuple[str, ...] = tuple(c.name for c in requests.columns)
TOKEN_GAP_COLUMNS: tuple[str, ...] = tuple(c.name for c in token_gaps.columns)
# the fields a run is written with (data_version is the store's own bookkeeping)
RUN_COLUMNS: tuple[str, ...] = tuple(c.name for c in runs.columns if c.name != "data_version")
