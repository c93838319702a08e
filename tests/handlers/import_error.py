"""A handler that raises at import: every worker exits at once (a crash loop)."""

raise RuntimeError("broken at import on purpose")
