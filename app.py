"""Streamlit entry for ``streamlit run app.py`` and AppTest: the frame and router of ui.frame.

``servescope ui`` runs ``ui/entry/streamlit_app.py`` instead, which calls the same function from a
folder with no ``pages/`` beside it: with this file, Streamlit's legacy ``pages/`` mode renders a
deep link opened as a fresh server's first request without the frame (see that file).
"""

from __future__ import annotations

from ui import frame

frame.run()
