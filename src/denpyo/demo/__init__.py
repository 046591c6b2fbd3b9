"""`denpyo demo`: the invoice-email story (a sender killed after the provider accepted and
before the database recorded), the naive way against the denpyo way. See `story`."""

from denpyo.demo.story import DemoResult, Quiet, Reporter, run_demo
from denpyo.errors import DemoError

__all__ = ["DemoError", "DemoResult", "Quiet", "Reporter", "run_demo"]
