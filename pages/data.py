"""Data: import result files, list and filter runs, rename, tag, delete, download requests."""

from __future__ import annotations

from functools import partial

import streamlit as st

from errors import ServeScopeError
from ui import data_view
from ui.cache import data as data_cache
from ui.errors import show_error

st.title("Data")
selection = data_view.selection()
try:
    view = data_cache.data_view(selection)
except ServeScopeError as exc:
    show_error(exc)
    st.stop()
empty = view.store_empty

with st.expander("Import result files", expanded=empty, icon=":material/upload:"):
    st.caption(
        f"vLLM, SGLang, GuideLLM, AIPerf, GenAI-Perf and llmperf files, up to "
        f"{data_view.MAX_UPLOAD_MB} MB each (the dashboard's upload limit; for larger files or "
        "whole folders use `servescope import PATH…`). The format is detected from the content."
    )
    files = st.file_uploader("Result files", accept_multiple_files=True, key="data_files")
    c1, c2, c3, c4, c5 = st.columns(5)
    framework = c1.text_input("Framework", key="data_framework")
    model = c2.text_input("Model", key="data_model")
    gpu = c3.text_input("GPU", key="data_gpu", placeholder="H100 80GB")
    gpus = c4.number_input("GPUs", min_value=0, step=1, key="data_gpus")
    tags = c5.text_input("Tags", key="data_tags", placeholder="a, b")
    if st.button("Import", key="data_import", disabled=not files, type="primary"):
        bar = st.progress(0.0, text="Importing…")
        report = data_view.import_uploads(
            files or [],
            framework=framework,
            model=model,
            gpu_name=gpu,
            gpu_count=int(gpus),
            tags=tags,
            progress=lambda i, n, path: bar.progress(i / n if n else 1.0, text=path),
        )
        st.dataframe(report, hide_index=True, key="data_report")
        view = data_cache.data_view(selection)

if view.store_empty:
    st.info(
        "No runs yet. Import result files above, or fill the store with "
        "`servescope import PATH…`, `servescope bench …` or `servescope demo`.",
        icon=":material/database:",
    )
    st.stop()

f1, f2, f3, f4 = st.columns(4)
f1.multiselect("Source", view.choices.sources, key=data_view.SOURCE_KEY)
f2.multiselect("Framework", view.choices.frameworks, key=data_view.FRAMEWORK_KEY)
f3.multiselect("Model", view.choices.models, key=data_view.MODEL_KEY)
f4.selectbox("Tag", ["", *view.choices.tags], key=data_view.TAG_KEY)
runs = view.runs
st.dataframe(runs, hide_index=True, key="data_runs")
if runs.empty:
    st.info("No run matches these filters.")
    st.stop()
if runs["aggregates_only"].any():
    st.caption(
        "`aggregates_only`: the file held only the tool's own aggregates — no per-request "
        "analysis for these runs."
    )

rows = runs.to_dict("records")
picked = st.selectbox(
    "Run", range(len(rows)), format_func=lambda i: data_view.run_label(rows[i]), key="data_run"
)
run = rows[picked if picked is not None else 0]
try:
    a, b = st.columns(2)
    name = a.text_input("Name", value=run["name"] or "", key=f"data_name_{run['run_id']}")
    if a.button("Rename", key="data_rename"):
        data_view.rename_run(run["run_id"], name)
        st.rerun()
    new_tags = b.text_input(
        "Tags (comma-separated)", value=run["tags"], key=f"data_tags_{run['run_id']}"
    )
    if b.button("Save tags", key="data_save_tags"):
        data_view.set_tags(run["run_id"], new_tags)
        st.rerun()
    d1, d2, d3 = st.columns(3)
    for col, fmt in zip((d1, d2), data_view.DOWNLOAD_FORMATS, strict=True):
        col.download_button(
            f"Requests as {fmt.upper()}",
            key=f"data_dl_{fmt}",
            data=partial(data_view.requests_download, str(run["run_id"]), fmt),
            file_name=f"{run['run_id']}.{fmt}",
        )
    sure = d3.checkbox("Yes, delete this run and its requests", key="data_confirm")
    if d3.button("Delete run", key="data_delete", disabled=not sure):
        data_view.delete_run(run["run_id"])
        st.rerun()
except ServeScopeError as exc:
    show_error(exc)
