"""Settings: flag > environment > default, loud failures, and a current settings document."""

from __future__ import annotations

import argparse

import pytest

from services.applier.service import ApplierSettings
from services.cli import docs
from services.common.settings import SettingsError, add_arguments, load


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser, ApplierSettings)
    return parser.parse_args(list(argv))


def test_flag_beats_environment_beats_default() -> None:
    env = {"DRIFTBUS_CONCURRENCY": "8", "DRIFTBUS_CLUSTER": "from-env", "NATS_URL": "nats://x:1"}
    s = load(ApplierSettings, parse("--cluster", "from-flag"), environ=env)
    assert s.cluster == "from-flag"
    assert s.concurrency == 8
    assert s.nats_url == "nats://x:1"
    assert s.max_backoff == ApplierSettings().max_backoff


def test_a_bad_value_names_the_variable() -> None:
    with pytest.raises(SettingsError, match="DRIFTBUS_CONCURRENCY='many'"):
        load(ApplierSettings, parse(), environ={"DRIFTBUS_CONCURRENCY": "many"})


def test_settings_document_is_current() -> None:
    assert docs.OUT.read_text() == docs.render(), "run: python -m services.cli.docs"
