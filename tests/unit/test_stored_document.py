"""One ``Document[T]`` for every setting kept on the bus (services/stored): a bad file is refused
with FILE:LINE, a bad stored version keeps the last good value and says why, and a follower
delivers every change — the same for the tenants, windows and notifications files."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import msgspec
import pytest

from schemas.notify import NotifyConfig
from schemas.tenants import TenantPolicy
from schemas.windows import SyncWindow, WindowsFile
from services.notify import config as notify_config
from services.stored import bucket
from services.stored.document import Document, Good, Problem
from services.tenancy.document import TENANTS
from services.windows.document import WINDOWS


class Toy(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    names: tuple[str, ...] = ()


class ToyError(Problem):
    pass


def _unique(toy: Toy) -> None:
    for i, name in enumerate(toy.names):
        if name in toy.names[:i]:
            raise ToyError(f"names[{i}]: {name!r} is named twice", ("names", i))


TOY = Document(
    kind=Toy, error=ToyError, name="the toy file", keys="names", stored="stored toy", check=_unique
)
DOCUMENTS: dict[str, Document[Any]] = {
    "toy": TOY,
    "windows": WINDOWS,
    "tenants": TENANTS,
    "notify": notify_config.document(""),
}


@pytest.mark.parametrize(
    ("doc", "text", "error"),
    [
        pytest.param("toy", "names: [a, b]\nnames2: 1\n", "f.yaml:1: Object contains unknown "
                     "field `names2`", id="toy-unknown-key-on-the-root-line"),
        pytest.param("toy", "# x\nnames:\n- a\n- b\n- a\n", "f.yaml:5: names[2]: 'a' is named "
                     "twice", id="toy-check-names-the-item-line"),
        pytest.param("toy", "names: []\n---\nnames: []\n", "f.yaml:3: a second document: the "
                     "toy file is one map", id="toy-second-document-its-line"),
        pytest.param("toy", "- a\n", "f.yaml:1: the toy file must be a map (names), not a list",
                     id="toy-not-a-map"),
        pytest.param("toy", "names: [\n", "f.yaml:2: invalid YAML", id="toy-bad-yaml"),
        pytest.param("toy", b"names: [\xff]\n", "f.yaml: not UTF-8 text", id="toy-not-utf8"),
        pytest.param("windows", "windows:\n- kind: deny\n  schedule: '@daily'\n  duration: 1d\n",
                     "f.yaml:2: windows[0] (deny-0): duration '1d' is not a Go duration",
                     id="windows-check"),
        pytest.param("windows", "windows:\n- kind: maybe\n  schedule: '@daily'\n  duration: 1h\n",
                     "f.yaml:2: Invalid enum value 'maybe'", id="windows-schema-key-line"),
        pytest.param("tenants", "tenants:\n  team-a:\n    serviceAccount: nope\n",
                     "f.yaml:3: tenant team-a: serviceAccount 'nope' must be NAMESPACE/NAME",
                     id="tenants-in-words"),
        pytest.param("notify", "providers:\n- name: p\n  type: webhook\n",
                     "f.yaml:2: providers[0] (p): a webhook takes one of url or urlFile",
                     id="notify-check"),
        pytest.param("notify", "providers: 3\n", "f.yaml:1: Expected `array`, got `int`",
                     id="notify-schema"),
    ],
)  # fmt: skip
def test_a_bad_file_is_refused_with_file_and_line(doc: str, text: str | bytes, error: str) -> None:
    document = DOCUMENTS[doc]
    with pytest.raises(document.error) as got:
        document.load(text, "f.yaml")
    assert str(got.value).startswith(error), str(got.value)


@pytest.mark.parametrize("doc", list(DOCUMENTS))
def test_an_empty_file_is_the_empty_document_and_round_trips(doc: str) -> None:
    document = DOCUMENTS[doc]
    assert document.load("", "f.yaml") == document.kind()
    assert document.decode(document.dump(document.kind())) == document.kind()
    assert document.decode(b"") == document.kind()


FREEZE = WindowsFile(windows=(SyncWindow(kind="deny", schedule="@daily", duration="1h"),))
BAD_WINDOW = b'{"windows":[{"kind":"deny","schedule":"@daily","duration":"1d"}]}'


@pytest.mark.parametrize(
    ("doc", "stored", "value", "problem"),
    [
        pytest.param("toy", [TOY.dump(Toy(("a",))), b"{oops"], Toy(("a",)),
                     "stored toy: JSON is malformed", id="toy-malformed-keeps-last-good"),
        pytest.param("toy", [TOY.dump(Toy(("a",))), b'{"names":["b","b"]}'], Toy(("a",)),
                     "stored toy: names[1]: 'b' is named twice", id="toy-check-keeps-last-good"),
        pytest.param("toy", [b"{oops", TOY.dump(Toy(("c",)))], Toy(("c",)), "",
                     id="toy-a-good-one-after-mends-it"),
        pytest.param("toy", [TOY.dump(Toy(("a",))), b"{oops", b""], Toy(), "",
                     id="toy-removed-is-empty"),
        pytest.param("toy", [], Toy(), "", id="toy-nothing-stored"),
        pytest.param("windows", [WINDOWS.dump(FREEZE), BAD_WINDOW], FREEZE,
                     "stored windows: windows[0] (deny-0): duration '1d' is not a Go duration",
                     id="windows-a-freeze-is-never-dropped-for-a-typo"),
        pytest.param("tenants", [TENANTS.dump(TenantPolicy(lockdown=True)), b"[]"],
                     TenantPolicy(lockdown=True), "stored tenant policy: Expected `object`",
                     id="tenants"),
        pytest.param("notify", [b"{}", b'{"alerts":[{"providers":["q"]}]}'], NotifyConfig(),
                     "stored notifications platform: alerts[0]: provider 'q' is not defined",
                     id="notify"),
    ],
)  # fmt: skip
def test_a_bad_stored_value_keeps_the_last_good_one_and_says_why(
    doc: str, stored: list[bytes], value: Any, problem: str
) -> None:
    good = DOCUMENTS[doc].last_good(stored)
    assert good.value == value
    assert good.problem.startswith(problem), good.problem
    assert bool(good.problem) is bool(problem), good.problem


# --- followed on the bus ------------------------------------------------------------------------


@dataclasses.dataclass
class FakeMessage:
    data: bytes
    headers: dict[str, str] | None = None


class FakeFollower:
    """``bus.Follower`` over a list of messages: what ``Following`` reads."""

    stored: ClassVar[list[FakeMessage]] = []

    def __init__(self, js: Any, stream: str, subject: str, *, history: bool = False) -> None:
        assert history, "every stored version, in order"
        self.subject = subject
        self.caught_up = asyncio.Event()

    async def messages(self) -> AsyncIterator[FakeMessage]:
        for msg in self.stored:
            yield msg
        self.caught_up.set()


async def test_a_follower_delivers_each_change_keeping_the_last_good(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bucket.bus, "Follower", FakeFollower)
    monkeypatch.setattr(
        FakeFollower,
        "stored",
        [
            FakeMessage(TOY.dump(Toy(("a",)))),
            FakeMessage(b'{"names":["b","b"]}'),
            FakeMessage(TOY.dump(Toy(("c",)))),
            FakeMessage(b"", {"KV-Operation": "DEL"}),
        ],
    )

    async def ensure(js: Any) -> None:
        return None

    kept = bucket.Kept(TOY, bucket="toys", key="toy", ensure=ensure)
    following = kept.following(None)  # type: ignore[arg-type]
    got = [good async for good in following.versions()]
    assert got == [
        Good(Toy(("a",))),
        Good(Toy(("a",)), "stored toy: names[1]: 'b' is named twice"),
        Good(Toy(("c",))),
        Good(Toy()),
    ]
    assert following.caught_up.is_set()
    assert kept.subject == "$KV.toys.toy"
