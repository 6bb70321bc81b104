"""The script ``servescope ui`` runs: the app's frame and router (ui.frame), nothing else.

It lives here, not at the repository root, because of where it is: Streamlit (1.67,
``streamlit/runtime/pages_manager.py``, ``PagesManager.__init__``) sets the process-wide flag
``PagesManager.uses_pages_directory`` when a folder named ``pages`` sits beside the main script,
and while that flag holds, the script runner (``script_runner.py``, ``_mpa_v1``) runs the page a
URL names *instead of* the main script, with a menu of ``pages/*.py`` in file order. Only a call
to ``st.navigation`` clears the flag, so on a fresh server a shared link such as
``/latency?run=…`` opened first rendered the page without the app's frame. This folder has no
``pages/`` beside it, so the flag starts false and every request runs this script, whose
``st.navigation`` routes it. The pages stay in the repository's ``pages/`` (absolute paths).

``app.py`` at the root calls the same :func:`ui.frame.run`; ``streamlit run app.py`` works, but
Streamlit's legacy mode applies to it until ``/`` has been opened once.
"""

from __future__ import annotations

from ui import frame

frame.run()
