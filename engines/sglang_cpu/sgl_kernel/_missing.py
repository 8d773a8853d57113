"""Names that resolve but refuse to run: what the stand-in offers for every kernel it does not implement."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Sequence
from typing import Any


class MissingKernel:
    """A kernel the stand-in lacks: importable, usable as a type or attribute holder, fails when called."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"{self._name} is not implemented by the CPU stand-in of sgl_kernel "
            "(engines/sglang_cpu); add a PyTorch version of it there"
        )

    def __getattr__(self, name: str) -> MissingKernel:
        if name.startswith("__"):
            raise AttributeError(name)
        return MissingKernel(f"{self._name}.{name}")

    def __repr__(self) -> str:
        return f"<missing kernel {self._name}>"


def missing(name: str) -> MissingKernel:
    return MissingKernel(name)


class _LenientModule(types.ModuleType):
    """A ``sgl_kernel.*`` submodule that exists only to satisfy imports."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return missing(f"{self.__name__}.{name}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Creates any ``<root>.x.y`` submodule that has no file of its own as a lenient module."""

    def __init__(self, root: str) -> None:
        self.root = root

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(self.root + "."):
            return None
        for finder in sys.meta_path:  # a real file wins
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _LenientModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def install_module_finder(root: str) -> None:
    """Let ``import root.anything`` succeed (once per process)."""
    if not any(isinstance(f, _Finder) and f.root == root for f in sys.meta_path):
        sys.meta_path.append(_Finder(root))
