"""Start-up of every contract-test subprocess: ``python boot.py SCRIPT`` in ``.venv-upstream``.

It makes the upstream sources importable on this CPU machine with as little interference as possible, then
runs SCRIPT as ``__main__``. Exactly three things are done, and nothing else of upstream is touched:

1. **Two Python 3.12 names on Python 3.11.** Megatron-Bridge 4588417 and Megatron-LM c8288b6 declare Python
   >= 3.12 and NeMo RL 7ea279a >= 3.13; their sources compile on 3.11 and use exactly two 3.12 names at
   import time: ``typing.override`` (PEP 698, an identity decorator) and the 3.12 ``typing.TypedDict`` that
   pydantic requires to build NeMo RL's ``MasterConfig``. Both are taken from ``typing_extensions``, which is
   where those 3.12 implementations are backported. We run 3.11 because the only CPU build of torch this
   machine image carries is for 3.11 (every other torch wheel is a CUDA build of several GB).
2. **Stand-ins for Transformer Engine only** (``transformer_engine``, ``transformer_engine_torch``): it has no
   CPU build and cannot be installed here. Megatron-Core and Model Optimizer import it optionally (and then
   run their non-TE code, as on any machine without TE); two Megatron-Bridge modules (``peft/lora.py``,
   ``peft/lora_layers.py``, pulled in by the recipe imports) import it unconditionally. So Megatron-Core and
   Model Optimizer are imported FIRST, with TE absent, and only then is the stand-in made importable: every
   attribute is a placeholder ``torch.nn.Module`` subclass whose construction raises, so a code path that
   would really use TE fails loudly instead of passing. Which modules asked for it is recorded
   (``STANDIN_USERS``) and printed by the tests.
3. Nothing is patched inside upstream modules; vLLM and mamba-ssm are left absent (upstream imports them
   lazily on the paths our tests reach).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import runpy
import sys
import types
import typing
import warnings

import typing_extensions

warnings.filterwarnings("ignore")

if not hasattr(typing, "override"):
    typing.override = typing_extensions.override
if sys.version_info < (3, 12):
    typing.TypedDict = typing_extensions.TypedDict
    typing.Required = typing_extensions.Required
    typing.NotRequired = typing_extensions.NotRequired

#: The only modules stood in for (no CPU build exists).
STANDIN = ("transformer_engine", "transformer_engine_torch")
#: (stand-in module, the module that imported it), in import order.
STANDIN_USERS: list[tuple[str, str]] = []


def _placeholder(qualname: str) -> type:
    import torch

    def _refuse(self, *args, **kwargs):
        raise RuntimeError(f"{qualname}: Transformer Engine stand-in (no CPU build); this path needs the real one")

    class _Meta(type(torch.nn.Module)):
        def __getattr__(cls, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return _placeholder(f"{qualname}.{name}")

    return _Meta(qualname.rsplit(".", 1)[-1], (torch.nn.Module,), {"__qualname__": qualname, "__init__": _refuse})


class _StandInModule(types.ModuleType):
    __path__: list[str] = []  # a package: submodules resolve through the finder too

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _placeholder(f"{self.__name__}.{name}")


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] not in STANDIN:
            return None
        caller = sys._getframe(1)
        while caller is not None and caller.f_globals.get("__name__", "").startswith(("importlib", "_frozen")):
            caller = caller.f_back
        STANDIN_USERS.append((fullname, caller.f_globals.get("__name__", "?") if caller else "?"))
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        return _StandInModule(spec.name)

    def exec_module(self, module):
        module.__version__ = "0.0.0+standin"


def _import_optional_te_users() -> None:
    """Megatron-Core and Model Optimizer decide "TE present?" at import: let them decide with TE absent."""
    for name in ("megatron.core", "megatron.core.models.mamba", "megatron.core.models.gpt",
                 "modelopt.torch.opt", "modelopt.torch.quantization"):
        try:
            __import__(name)
        except ImportError:  # not on this script's path (a NeMo RL-only check)
            pass


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: boot.py SCRIPT [ARGS...]")
    sys.modules.setdefault("contract_boot", sys.modules[__name__])  # scripts read STANDIN_USERS from it
    _import_optional_te_users()
    sys.meta_path.insert(0, _StandInFinder())
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
