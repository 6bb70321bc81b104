"""Streamlit entry point: page config, the navigation over pages/, and the frame around them.

Run with ``servescope ui`` (or ``streamlit run app.py``). Pages never depend on widgets created
here (ARCHITECTURE §8): they read shared selections through ui.state.
"""

from __future__ import annotations

import streamlit as st

from ui import cache, nav

st.set_page_config(page_title="ServeScope", page_icon=":material/speed:", layout="wide")

page = st.navigation(
    [
        st.Page(p.path, title=p.title, icon=p.icon, url_path=p.url_path, default=p.default)
        for p in nav.PAGES
    ]
)

with st.sidebar:
    st.caption("Store")
    st.code(cache.masked_store_url(), language=None, wrap_lines=True)
    st.button(
        "Refresh data",
        key="refresh_data",
        icon=":material/refresh:",
        help=f"Results are cached for {cache.TTL_S} s; this reads the store again now.",
        on_click=cache.clear,
    )

page.run()
