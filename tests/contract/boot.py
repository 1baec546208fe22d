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
   CPU build and cannot be installed here. Megatron-Core, Model Optimizer and most of Megatron-Bridge import it
   optionally (``try: import ...``) and then run their non-TE code, as on any machine without TE: for them TE
   stays ABSENT. A few Megatron-Bridge modules (``STANDIN_FOR``: ``peft/lora.py``, ``peft/lora_layers.py``, ...,
   pulled in by the recipe imports) import it unconditionally; only those importers get the stand-in, through
   ``__import__`` and never through ``sys.modules`` (so no later ``try: import`` finds it). Every class in it is
   a placeholder ``torch.nn.Module`` subclass whose construction raises, every function raises when called: a
   code path that would really use TE fails loudly instead of passing. Which modules got it is recorded
   (``STANDIN_USERS``) and checked by tests/contract/test_harness.py.
3. Nothing is patched inside upstream modules; vLLM and mamba-ssm are left absent (upstream imports them
   lazily on the paths our tests reach).
"""

from __future__ import annotations

import builtins
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
#: The upstream modules that import Transformer Engine unconditionally (no ``try``), and only they, get the
#: stand-in; for every other importer TE stays absent (ModuleNotFoundError), as on a machine without it.
STANDIN_FOR = ("megatron.bridge.peft.lora", "megatron.bridge.peft.lora_layers",
               "megatron.bridge.models.gpt_full_te_layer_autocast_spec", "megatron.bridge.diffusion.models.wan.utils")
#: (stand-in module, the module that imported it), in import order.
STANDIN_USERS: list[tuple[str, str]] = []


def _refuser(qualname: str):
    def _refuse(*args, **kwargs):
        raise RuntimeError(f"{qualname}: Transformer Engine stand-in (no CPU build); this path needs the real one")
    return _refuse


def _placeholder(qualname: str) -> type:
    import torch

    class _Meta(type(torch.nn.Module)):
        def __getattr__(cls, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return _placeholder(f"{qualname}.{name}")

    return _Meta(qualname.rsplit(".", 1)[-1], (torch.nn.Module,),
                 {"__qualname__": qualname, "__init__": _refuser(qualname)})


class _StandInModule(types.ModuleType):
    """A stand-in (sub)module: lower-case attributes are stand-in submodules/functions (calling one raises),
    capitalised ones placeholder classes (constructing one raises). Never entered in ``sys.modules``."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _StandInModule(f"{self.__name__}.{name}") if name[:1].islower() else \
            _placeholder(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value

    def __call__(self, *args, **kwargs):
        _refuser(self.__name__)()


_MODULES: dict[str, _StandInModule] = {}
_real_import = builtins.__import__


def _import(name, globals=None, locals=None, fromlist=(), level=0):
    top = name.split(".")[0]
    if level == 0 and top in STANDIN:
        importer = (globals or {}).get("__name__", "?")
        if importer not in STANDIN_FOR:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        STANDIN_USERS.append((name, importer))
        root = _MODULES.setdefault(top, _StandInModule(top))
        root.__version__ = "0.0.0+standin"
        if fromlist:
            node = root
            for part in name.split(".")[1:]:
                node = getattr(node, part)
            return node
        return root
    return _real_import(name, globals, locals, fromlist, level)


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: boot.py SCRIPT [ARGS...]")
    sys.modules.setdefault("contract_boot", sys.modules[__name__])  # scripts read STANDIN_USERS from it
    builtins.__import__ = _import
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
