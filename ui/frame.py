"""The app's router and frame: page config, the navigation over pages/, the sidebar's store box.

Both entry scripts call :func:`run` and nothing else: ``ui/entry/streamlit_app.py`` (what
``servescope ui`` runs) and ``app.py`` (``streamlit run app.py``, AppTest). Pages never depend on
widgets created here (DESIGN §8): they read shared selections through ui.state.
"""

from __future__ import annotations

import streamlit as st

from ui import cache, nav


def run() -> None:
    """Configure the page, register every page of ``nav.PAGES``, draw the frame, run the page."""
    st.set_page_config(page_title="ServeScope", page_icon=":material/speed:", layout="wide")

    page = st.navigation(
        [
            # Absolute paths: Streamlit resolves relative ones against the main script's folder,
            # which is not the repository root for ui/entry/streamlit_app.py.
            st.Page(str(p.file), title=p.title, icon=p.icon, url_path=p.url_path, default=p.default)
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
