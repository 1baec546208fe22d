"""Start-up of every contract-test script: ``python boot.py SCRIPT`` in ``.venv-upstream``, or ``python boot.py
--serve``, which does the same start-up once, imports the frameworks (:data:`PRELOAD`) and then runs each script it is
sent in a fork of itself (:func:`serve`; the client is ``upstream._ForkServer``).

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


#: What the server of :func:`serve` imports before it forks: the frameworks every contract script imports
#: (about 15 CPU-seconds on 2 cores; a contract script's own work is mostly less).
PRELOAD = ("torch", "transformers", "megatron.core", "megatron.bridge", "nemo_rl")


def _run_script(script: str, argv: list[str]) -> None:
    sys.argv = [script, *argv]
    runpy.run_path(script, run_name="__main__")


def _child(request: dict, channels: tuple[int, int]) -> None:
    """In the forked child: the request's folder, environment, stdin and output files, then the script; never
    returns (``os._exit`` with the script's exit status, as ``python boot.py SCRIPT`` would end)."""
    import os
    import traceback

    code = 0
    try:
        for fd in channels:  # the request channel is fd 0, replaced below; the response channel is closed
            if fd > 2:
                os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for fd, path, mode in ((0, request["stdin"], os.O_RDONLY),
                               (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                               (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
            opened = os.open(path, mode, 0o644)
            os.dup2(opened, fd)
            os.close(opened)
        sys.stdin = open(0, closefd=False, encoding="utf-8")
        _run_script(request["script"], request.get("argv", []))
    except SystemExit as exc:  # as the interpreter ends: None is 0, an int itself, anything else printed and 1
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - the script's failure, reported like the interpreter's own
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve() -> None:
    """``python boot.py --serve``: import :data:`PRELOAD` once, then run each request in a fork of this process.

    Requests are JSON lines on stdin (``script``, ``argv``, ``cwd``, ``env``, and the ``stdin``/``stdout``/``stderr``
    files); for each, one JSON line ``{"pid": N}`` when the child starts and ``{"status": S}`` (its exit status, or
    minus the signal that ended it) when it ends go to stdout. The child is the state of a fresh ``boot.py SCRIPT``
    process after the preloaded imports: the same import hook, the same environment at import time (the contract
    environment), no thread but the main one (checked here: a fork copies no other thread).
    """
    import importlib
    import json
    import os
    import threading

    requests, responses = sys.stdin.fileno(), os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints of the imports stay off the response channel
    for name in PRELOAD:
        importlib.import_module(name)
    if threading.active_count() != 1:
        sys.exit(f"boot.py --serve: {threading.active_count()} threads after the preloaded imports; a fork would "
                 "copy only the main one")
    os.write(responses, b'{"ready": true}\n')
    with os.fdopen(requests, encoding="utf-8") as lines:
        for line in lines:
            request = json.loads(line)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(request, (requests, responses))
            os.write(responses, (json.dumps({"pid": pid}) + "\n").encode())
            _, status = os.waitpid(pid, 0)
            status = os.waitstatus_to_exitcode(status)
            os.write(responses, (json.dumps({"status": status}) + "\n").encode())


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: boot.py SCRIPT [ARGS...] | boot.py --serve")
    sys.modules.setdefault("contract_boot", sys.modules[__name__])  # scripts read STANDIN_USERS from it
    builtins.__import__ = _import
    if sys.argv[1] == "--serve":
        serve()
        return
    _run_script(sys.argv[1], sys.argv[2:])


if __name__ == "__main__":
    main()
