"""The pure core: statuses, allowed moves, back-off, classification, limits. No I/O."""
