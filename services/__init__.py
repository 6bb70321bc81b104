"""The application layer: what the surfaces (the CLI, the pages) ask for, free of Streamlit.

``services.commands`` holds the commands (bench, import, export, watch, demo, db, prepare, ui);
``services.views`` one view-model builder per page: ``<page>_view(store, selection)`` returns a
frozen dataclass of everything the page shows. Layers: ``pages → ui → services → {collectors,
sim} → store``, with ``analysis`` pure beside them; nothing below imports this package.
"""
