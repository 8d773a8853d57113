"""Runtime fix-ups that let SGLang 0.5.23 serve hybrid Gated-DeltaNet models (Qwen3-Next) on a CPU.

Python imports ``sitecustomize`` at start-up from the first ``sys.path`` entry that has one, so with this
directory on ``PYTHONPATH`` it runs in every SGLang process (launcher, scheduler, detokenizer). It does
nothing by itself: it registers fix-ups that run right after the SGLang module they concern has been
imported, and only when

- ``SGLANG_USE_CPU_ENGINE=1`` (SGLang's own switch for its CPU engine), and
- the installed SGLang is 0.5.23: the patched names are that version's internals. Another version gets a
  warning and no fix-ups.

The fix-ups (each small, each only touching what exists):

1. ``torch.get_device_module()`` without a device returns ``torch.cuda`` on a CUDA build of torch even when no
   GPU is present; the Qwen3-Next layers call ``.current_device()`` on it while being built, which fails. With
   no GPU, the no-argument call answers ``torch.cpu``.
2. ``FusedRMSNormGated`` (after the linear attention) runs a Triton kernel, for which there is no CPU driver,
   unless its module's ``_use_cpu`` is set, which SGLang sets only on CPUs with AMX. Setting it sends the norm to
   ``torch.ops.sgl_kernel.fused_rmsnorm_gated_cpu`` (registered by the ``sgl_kernel`` stand-in).
3. The Qwen2-MoE shared-expert gate (``sigmoid(x . w) * shared (+ routed)``) is a Triton-only kernel,
   ``_launch_fused_gate_sigmoid_mul``; it is replaced by the same computation in PyTorch.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

PINNED_VERSION = "0.5.23"
Fixup = Callable[[types.ModuleType], None]


# --- the fix-ups ------------------------------------------------------------------------------------


def _cpu_device_module_by_default(_module: types.ModuleType) -> None:
    """Fix-up 1: ``torch.get_device_module()`` with no argument is ``torch.cpu`` when CUDA is unavailable."""
    import torch

    original = torch.get_device_module
    if getattr(original, "_cpu_default", False):
        return

    def get_device_module(device: Any = None) -> types.ModuleType:
        if device is None and not torch.cuda.is_available():
            return torch.cpu
        return original(device)

    get_device_module._cpu_default = True  # type: ignore[attr-defined]
    get_device_module.__doc__ = original.__doc__
    torch.get_device_module = get_device_module


def _gated_norm_on_cpu(module: types.ModuleType) -> None:
    """Fix-up 2: ``FusedRMSNormGated.forward`` takes its CPU branch."""
    if hasattr(module, "_use_cpu") and hasattr(module, "FusedRMSNormGated"):
        module._use_cpu = True


def _gate_sigmoid_mul(hidden_states: Any, gate_weight: Any, shared_output: Any, output: Any, *, do_add: bool) -> None:
    """``output = sigmoid(hidden_states @ gate_weight) * shared_output (+ output)``, in float32, per token.

    Same contract as the Triton launcher it replaces: ``gate_weight`` is ``[hidden]``, the other three are
    ``[tokens, hidden]`` and ``output`` is written in place.
    """
    import torch

    gate = torch.sigmoid(hidden_states.float() @ gate_weight.float())[:, None]
    result = gate * shared_output.float()
    if do_add:
        result = result + output.float()
    output.copy_(result)


def _shared_expert_gate_in_torch(module: types.ModuleType) -> None:
    """Fix-up 3: the shared-expert gate kernel launcher becomes :func:`_gate_sigmoid_mul`."""
    if hasattr(module, "_launch_fused_gate_sigmoid_mul"):
        module._launch_fused_gate_sigmoid_mul = _gate_sigmoid_mul


FIXUPS: dict[str, Fixup] = {
    "sglang.srt.models.qwen3_next": _cpu_device_module_by_default,
    "sglang.srt.models.qwen3_5": _cpu_device_module_by_default,
    "sglang.kernels.ops.attention.fla.fused_norm_gate": _gated_norm_on_cpu,
    "sglang.kernels.ops.elementwise.elementwise": _shared_expert_gate_in_torch,
}


# --- running a fix-up after a module is imported ----------------------------------------------------


class _FixupLoader(importlib.abc.Loader):
    """Wraps a module's own loader; runs the fix-up once the module has executed."""

    def __init__(self, loader: importlib.abc.Loader, fixup: Fixup) -> None:
        self._loader = loader
        self._fixup = fixup

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self._loader.exec_module(module)
        if _pinned_version():
            self._fixup(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_resource_reader, ...: the original's
        return getattr(self._loader, name)


class _FixupFinder(importlib.abc.MetaPathFinder):
    """Finds the modules named in :data:`FIXUPS` with the other finders and wraps their loaders."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        fixup = FIXUPS.get(fullname)
        if fixup is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _FixupLoader(spec.loader, fixup)
                return spec
        return None


_version_ok: bool | None = None


def _pinned_version() -> bool:
    """Whether the installed SGLang is the version these fix-ups were written for (warns once if not)."""
    global _version_ok
    if _version_ok is None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            installed = version("sglang")
        except PackageNotFoundError:
            installed = "none"
        _version_ok = installed == PINNED_VERSION
        if not _version_ok:
            print(
                f"sitecustomize (engines/sglang_cpu): SGLang {installed} is installed, the CPU fix-ups are for "
                f"{PINNED_VERSION}; not applying them",
                file=sys.stderr,
            )
    return _version_ok


def _install() -> None:
    if os.environ.get("SGLANG_USE_CPU_ENGINE") != "1":
        return
    if not any(isinstance(f, _FixupFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _FixupFinder())


_install()
