"""The API reference (docs/reference/api.md) shows every public name: each is named
by a `::: path` line of the page, or is a member of a module the page shows whole,
and has a docstring, as have its class's public methods: mkdocstrings leaves out
what has none, so a name without one would be on the page and not shown. Read
statically with griffe, as mkdocstrings reads it."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import griffe
import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reference" / "api.md"

# The modules a user imports from, and the names each offers: a module's
# `__all__` where it has one.
PUBLIC_MODULES = {
    "denpyo": None,
    "denpyo.testing": None,
    "denpyo.web": None,
    "denpyo.contrib.django": None,
    "denpyo.channels.http": ["HttpChannel"],
    "denpyo.channels.rabbitmq": ["RabbitMQChannel"],
    "denpyo.channels.nats": ["JetStreamChannel"],
    "denpyo.channels.aws": ["SqsFifoChannel", "SnsFifoChannel", "SesChannel"],
    "denpyo.channels.stripe": ["StripeChannel"],
    "denpyo.channels.sendgrid": ["SendGridChannel"],
    "denpyo.channels.twilio": ["TwilioChannel"],
    "denpyo.metrics": ["Metrics"],
    "denpyo.webhooks": ["create_app"],
}


@pytest.fixture(scope="module")
def package() -> griffe.Module:
    loader = griffe.GriffeLoader(search_paths=[str(ROOT / "src")])
    module = loader.load("denpyo")
    loader.resolve_aliases(implicit=True, external=False)
    assert isinstance(module, griffe.Module)
    return module


def _public() -> list[tuple[str, str]]:
    """(module, name) for every public name."""
    found = []
    for module, names in PUBLIC_MODULES.items():
        if names is None:
            names = _all(module)
        found += [(module, name) for name in names]
    return found


def _all(module: str) -> list[str]:
    """A module's `__all__`, read from its source (denpyo.contrib.django imports
    only in a configured Django project)."""
    path = ROOT / "src" / module.replace(".", "/") / "__init__.py"
    found = re.search(r"^__all__ = \[(.*?)\]", path.read_text(), re.M | re.S)
    assert found is not None, module
    return re.findall(r'"(\w+)"', found.group(1))


def _directives() -> list[tuple[str, list[str] | None]]:
    """Each `::: path` of the page, with its `members:` list if it has one."""
    found: list[tuple[str, list[str] | None]] = []
    for line in PAGE.read_text().splitlines():
        if line.startswith("::: "):
            found.append((line[4:].strip(), None))
        elif line.strip().startswith("members:") and found:
            names = re.findall(r"\w+", line.split(":", 1)[1])
            found[-1] = (found[-1][0], names)
    return found


def _get(package: griffe.Module, path: str) -> Any:
    obj: Any = package
    for part in path.split(".")[1:]:
        obj = obj[part]
    return obj.final_target if obj.is_alias else obj


def test_the_public_modules_are_the_package_s() -> None:
    assert _all("denpyo") == list(importlib.import_module("denpyo").__all__)


@pytest.mark.parametrize(("module", "name"), _public())
def test_every_public_name_is_in_the_reference(
    package: griffe.Module, module: str, name: str
) -> None:
    target = _get(package, f"{module}.{name}")
    shown = False
    for path, members in _directives():
        obj = _get(package, path)
        if obj.path == target.path:
            shown = True
        elif obj.is_module and target.parent.path == obj.path:
            shown = shown or members is None or name in members
    assert shown, f"{module}.{name} ({target.path}) is not in docs/reference/api.md"
    assert target.docstring, f"{target.path} has no docstring: the reference hides it"
    if target.is_class:
        for member_name, member in target.members.items():
            member = member.final_target if member.is_alias else member
            if member.is_function and not member_name.startswith("_"):
                assert member.docstring, f"{member.path} has no docstring: hidden"


def test_a_documented_function_documents_every_parameter(package: griffe.Module) -> None:
    """A docstring that names one parameter with `:param x:` names them all (the
    channel's eleven were two)."""
    missing = []
    for module, name in _public():
        target = _get(package, f"{module}.{name}")
        functions = [target] if target.is_function else []
        if target.is_class:
            functions += [m for m in target.members.values() if not m.is_alias and m.is_function]
        for function in functions:
            text = function.docstring.value if function.docstring else ""
            said = set(re.findall(r":param (\w+):", text))
            if not said:
                continue
            wanted = {p.name for p in function.parameters if p.name not in ("self", "cls")}
            missing += [f"{function.path}({p})" for p in sorted(wanted - said)]
    assert not missing, missing
