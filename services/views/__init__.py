"""One view-model builder per page: ``<page>_view(store, selection) -> <Page>View`` (frozen
dataclasses of everything the page shows, built from store reads and ``analysis`` functions).
``ui.cache`` wraps the builders; ``services.commands.prepare`` calls them with each page's
default selection."""
