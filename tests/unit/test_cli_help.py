"""Every option of every command says what it does, and its default when it has one."""

from __future__ import annotations

import argparse

from services.cli.main import build_parser


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
