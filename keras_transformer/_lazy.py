"""Lazy package attributes (PEP 562): a package lists which module defines each public name, and
the module is imported on first use. `import keras_transformer` then costs nothing, and the
`serve` and `translate` commands never import the trainer, the vocabulary learner or matplotlib.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def lazy_attributes(package: str, sources: Mapping[str, str]) -> Callable[[str], object]:
    """Returns a module-level `__getattr__` for `package`.

    Args:
        package: the package's `__name__`.
        sources: public name -> module (relative to `package`, e.g. ".trainer") defining it; a
            module is also reachable under its own name when listed as `{"layers": ".layers"}`.

    Returns:
        `__getattr__(name)`, which imports the defining module on first use.
    """

    def __getattr__(name: str) -> object:
        if name not in sources:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(sources[name], package)
        return module if sources[name].rsplit(".", 1)[-1] == name else getattr(module, name)

    return __getattr__
