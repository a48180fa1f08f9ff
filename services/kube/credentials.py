"""kubernetes-asyncio's credential loaders (kubeconfig, exec plugins, in-cluster service account),
without the API models its ``client`` package imports.

``kubernetes_asyncio.config`` needs ``kubernetes_asyncio.client.Configuration`` and nothing else
of that package, but importing the package runs its ``__init__``, which imports every generated
API class and model: ~1.7 s of CPU and ~70 MiB of resident memory in every watcher and applier
(and in every test subprocess), for classes driftbus never uses (its HTTP and JSON are its own).
So before the loaders are imported, ``kubernetes_asyncio`` and ``kubernetes_asyncio.client`` are
registered as bare packages over the same directories (the top package's ``__init__`` imports
``client`` too): its submodules import as usual (``configuration`` here), the models
only if something asks for them (``ApiClient``, which the loaders import but only the
``new_client_from_config`` helpers call).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubernetes_asyncio.client import Configuration

_TOP = "kubernetes_asyncio"
_CLIENT = f"{_TOP}.client"


def _api_client(*args: Any, **kwargs: Any) -> Any:
    """The real ``ApiClient`` (and with it every model), loaded only when one is made."""
    real = importlib.import_module(f"{_CLIENT}.api_client").ApiClient
    return real(*args, **kwargs)


def _bare_package(name: str, search_path: list[str] | None = None) -> types.ModuleType:
    """``name`` registered as a package whose ``__init__`` is not run."""
    spec = importlib.util.find_spec(name) if search_path is None else None
    if search_path is None:
        if spec is None or spec.submodule_search_locations is None:
            raise ImportError(f"{name} is not installed as a package")
        search_path = list(spec.submodule_search_locations)
    package = types.ModuleType(name)
    package.__path__ = search_path
    package.__package__ = name
    if spec is not None:
        package.__spec__ = spec
        package.__file__ = spec.origin
    sys.modules[name] = package
    return package


def _bare_client_package() -> None:
    if _CLIENT in sys.modules:
        return  # the whole package is loaded already (or the bare one is in place)
    # the top package's __init__ imports client, dynamic, stream and watch: all the models
    top = sys.modules.get(_TOP) or _bare_package(_TOP)
    package = _bare_package(_CLIENT, [str(Path(p) / "client") for p in top.__path__])
    configuration = importlib.import_module(f"{_CLIENT}.configuration")
    package.Configuration = configuration.Configuration  # type: ignore[attr-defined]
    package.ApiClient = _api_client  # type: ignore[attr-defined]


def new_configuration() -> Configuration:
    _bare_client_package()
    from kubernetes_asyncio.client.configuration import Configuration

    return Configuration()


async def from_kubeconfig(path: str | None, context: str | None) -> Configuration:
    """The connection settings of ``context`` (the current one when None) in the kubeconfig at
    ``path`` (``$KUBECONFIG`` or ``~/.kube/config`` when None)."""
    config = new_configuration()
    from kubernetes_asyncio.config import load_kube_config

    await load_kube_config(
        config_file=path, context=context, client_configuration=config, persist_config=False
    )
    return config


def in_cluster() -> Configuration:
    """The pod's service-account token and CA, and the API server from its environment."""
    config = new_configuration()
    from kubernetes_asyncio.config import load_incluster_config

    load_incluster_config(client_configuration=config)  # type: ignore[no-untyped-call]
    return config
