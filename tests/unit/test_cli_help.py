"""Every option of every command says what it does, and its default when it has one."""

from __future__ import annotations

import argparse

from services.cli.main import FAMILIES, build_parser


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_every_option_has_help_and_shows_its_default() -> None:
    missing: list[str] = []
    for name, p in _commands().items():
        for action in p._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            where = f"driftbus {name} {'/'.join(action.option_strings) or action.dest}"
            text = action.help or ""
            if not text or text == argparse.SUPPRESS:
                missing.append(f"{where}: no help")
                continue
            shown = "%(default)s" in text or "default" in text
            default = action.default
            if action.option_strings and default not in (None, False, [], "") and not shown:
                missing.append(f"{where}: default {default!r} not shown")
    assert not missing, "\n".join(missing)


def test_version_is_a_command() -> None:
    assert "version" in _commands()


def _choices(parser: argparse.ArgumentParser) -> list[str]:
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return list(sub.choices)


def test_each_command_is_parsed_by_the_module_that_registers_it() -> None:
    """``driftbus COMMAND`` imports only its command's module (main.FAMILIES): the table names
    exactly what each module registers, and together they are the whole command line."""
    import importlib

    for module, commands in FAMILIES.items():
        alone = argparse.ArgumentParser()
        importlib.import_module(f"services.cli.{module}").add_parser(
            alone.add_subparsers(dest="command")
        )
        assert tuple(_choices(alone)) == commands, module
        for command in commands:
            assert _choices(build_parser(command)) == list(commands)
    assert _choices(build_parser()) == [c for cs in FAMILIES.values() for c in cs]
    assert _choices(build_parser("no-such-command")) == _choices(build_parser())


def test_a_command_imports_only_its_own_family() -> None:
    """Measured in a fresh interpreter: ``driftbus status`` does not load the services, the
    control plane or the status page (each ~0.3 s of CPU on every invocation before)."""
    import subprocess
    import sys

    probe = (
        "import sys; from services.cli.main import build_parser; build_parser('status'); "
        "print(sorted(m for m in sys.modules if m.startswith(('services.planner.service', "
        "'services.applier.service', 'services.source.service', 'services.ui', "
        "'services.controlplane'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]", out
