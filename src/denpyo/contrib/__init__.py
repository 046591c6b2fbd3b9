"""Integrations with application frameworks. Each imports its framework; the core
never imports them, so `import denpyo` works without any of them installed."""
