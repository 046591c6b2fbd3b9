"""The engine: submit, claim, attempt, settle, reconcile, work. It decides what
happens next (with the pure rules of `denpyo.domain`) and asks the store to
record it; it never writes SQL."""
