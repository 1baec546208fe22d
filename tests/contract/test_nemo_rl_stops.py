"""Contract: how NeMo RL's GRPO trainers stop below ``grpo.max_num_steps``, at the pinned NeMo RL (main 7ea279a).

Our runtime rests on two readings of this code (issue 30, finding 4, and the audit after it):

* at ``checkpointing.checkpoint_must_save_by`` each GRPO trainer saves the step, prints "Timeout has been reached,
  stopping training early" and **returns** (the entry exits 0): :func:`nemotron.runtime.rl.nemo_rl.finish` takes a
  newest step below ``max_num_steps`` with a deadline set as that stop and requeues the run (exit 75);
* a ``grpo.stop_at_validation_metric`` stop saves the step too and returns before the timeout branch, after printing
  ``_validation_early_stop_message``'s line: :func:`nemotron.runtime.rl.nemo_rl.stop_reason` tells the two apart by
  those lines (:data:`~nemotron.runtime.rl.nemo_rl.TIMEOUT_LINE`, :data:`~nemotron.runtime.rl.nemo_rl.EARLY_STOP`).

The trainers need Ray and GPUs, so this test reads the pinned source (``ast``): it fails when a trainer stops saving
at the timeout, stops returning normally there (raises, exits), prints another line, or reorders the two branches;
and it renders the early-stop line with NeMo RL's own ``_validation_early_stop_message`` (its source, executed
alone: it needs nothing but ``typing``). Then the runtime's reading must be revisited.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from nemotron.runtime.rl import nemo_rl
from upstream import sources

#: The trainers the entries our runtime starts can run (examples/run_grpo.py: grpo_train, or grpo_train_sync with
#: data_plane.enabled, or async_grpo_train; examples/nemo_gym/run_grpo_nemo_gym.py: grpo_train, async_grpo_train).
TRAINERS = [("nemo_rl/algorithms/grpo.py", "grpo_train"), ("nemo_rl/algorithms/grpo.py", "async_grpo_train"),
            ("nemo_rl/algorithms/grpo_sync.py", "grpo_train_sync")]


@pytest.fixture(scope="module")
def nemo_rl_root() -> Path:
    try:
        return sources()["RL"]
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


def _function(path: Path, name: str) -> ast.FunctionDef:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return next(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name)


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _calls(nodes: list[ast.stmt]) -> set[str]:
    """Names of the functions and methods the statements call (``checkpointer.shutdown()`` -> ``shutdown``)."""
    out = set()
    for stmt in nodes:
        for n in ast.walk(stmt):
            if isinstance(n, ast.Call):
                f = n.func
                out.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
    return out


def _timeout_derived(fn: ast.FunctionDef) -> set[str]:
    """``should_save_by_timeout`` and every name assigned from an expression that reads one of them (the async loop
    saves under ``saving_this_step = will_save_checkpoint``, ``will_save_checkpoint = ... should_save_by_timeout``)."""
    derived = {"should_save_by_timeout"}
    assigns = [n for n in ast.walk(fn) if isinstance(n, ast.Assign)]
    while True:
        more = {t.id for a in assigns if _names(a.value) & derived for t in a.targets if isinstance(t, ast.Name)}
        if more <= derived:
            return derived
        derived |= more


def _blocks(fn: ast.FunctionDef) -> list[list[ast.stmt]]:
    return [getattr(n, f) for n in ast.walk(fn) for f in ("body", "orelse", "finalbody")
            if isinstance(getattr(n, f, None), list)]


@pytest.mark.parametrize("path,name", TRAINERS, ids=[t[1] for t in TRAINERS])
def test_the_timeout_saves_the_step_prints_its_line_and_returns(nemo_rl_root, path, name):
    fn = _function(nemo_rl_root / path, name)
    text = ast.unparse(fn)
    assert "TimeoutChecker(timeout=master_config.checkpointing['checkpoint_must_save_by']" in text
    assert "should_save_by_timeout = timeout.check_save()" in text
    # the save: an `if` on a value that reads should_save_by_timeout, whose body writes the checkpoint
    derived = _timeout_derived(fn)
    saves = [n for n in ast.walk(fn) if isinstance(n, ast.If) and _names(n.test) & derived
             and {"init_tmp_checkpoint", "save_checkpoint"} <= _calls(n.body)]
    assert saves, f"{path} {name}: no checkpoint save under should_save_by_timeout"
    # the stop: `if should_save_by_timeout:` flushes the checkpointer, prints the line and returns (no raise, no exit)
    stops = [n for n in ast.walk(fn) if isinstance(n, ast.If) and ast.unparse(n.test) == "should_save_by_timeout"
             and any(isinstance(s, ast.Return) for s in n.body)]
    assert len(stops) == 1, f"{path} {name}: {len(stops)} timeout returns"
    body = stops[0].body
    assert isinstance(body[-1], ast.Return) and body[-1].value is None
    assert not any(isinstance(n, ast.Raise) for s in body for n in ast.walk(s))
    assert "shutdown" in _calls(body) and not {"exit", "_exit"} & _calls(body)
    printed = [ast.literal_eval(c.args[0]) for s in body for c in ast.walk(s)
               if isinstance(c, ast.Call) and getattr(c.func, "id", "") == "print" and c.args
               and isinstance(c.args[0], ast.Constant)]
    assert printed == [nemo_rl.TIMEOUT_LINE]
    assert nemo_rl.stop_reason(printed[0] + "\n") == nemo_rl.DEADLINE
    # the early stop returns first, in the same block, without the timeout line
    block = next(b for b in _blocks(fn) if stops[0] in b)
    early = [s for s in block[:block.index(stops[0])] if isinstance(s, ast.If)
             and ast.unparse(s.test) == "early_stop_message is not None"]
    assert early and isinstance(early[-1].body[-1], ast.Return), f"{path} {name}: no early-stop return before the timeout"
    # and the early-stop line is printed in the loop (the message `_validation_early_stop_message` renders)
    assert "print(early_stop_message, flush=True)" in text


def test_the_early_stop_line_is_read_as_a_validation_stop(nemo_rl_root):
    """NeMo RL's own ``_validation_early_stop_message`` renders the line (its source executed alone) for a
    validation step and for the initial validation; :func:`nemo_rl.stop_reason` reads both as the early stop, and
    below the threshold there is no line."""
    tree = ast.parse((nemo_rl_root / "nemo_rl/algorithms/grpo.py").read_text(encoding="utf-8"))
    wanted = {"_validation_early_stop_message", "_validation_stop_value"}
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    assert {f.name for f in funcs} == wanted
    ns: dict = {}
    exec("from typing import Any, Optional", ns)
    exec(compile(ast.Module(body=funcs, type_ignores=[]), "grpo.py", "exec"), ns)
    render = ns["_validation_early_stop_message"]
    for metric, value, initial in (("accuracy", 0.91, False), ("pass_k", 1.0, True), ("total_reward/mean", 0.5, False)):
        line = render({metric: value}, 0.5, metric, initial=initial)
        assert nemo_rl.stop_reason(line + "\n") == nemo_rl.VALIDATION_STOP, line
        assert nemo_rl.EARLY_STOP.search(line)["metric"] == metric
    assert render({"accuracy": 0.1}, 0.9, "accuracy") is None
    assert render({"accuracy": 0.1}, 0.9, None) is None


#: Megatron-Core's own ``trace_async_exceptions`` (megatron/core/utils.py at the pinned Megatron-LM) around an engine
#: loop named as the dynamic engine's, failing as it did on one H100 (2026-12-06); the log records it makes.
_ENGINE_DEATH = r"""
import asyncio, logging
from upstream import write_result
from megatron.core import utils

records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append(self.format(record))
logging.getLogger(utils.__name__).addHandler(Keep())

out = {}
for name in ("run_engine_with_coordinator", "run_engine"):
    async def loop():
        raise ModuleNotFoundError("No module named 'flash_attn'")
    loop.__name__ = loop.__qualname__ = name
    try:
        asyncio.run(utils.trace_async_exceptions(loop)())
        out[name] = "returned"
    except SystemExit as exc:
        out[name] = f"SystemExit({exc.code})"
    except Exception as exc:
        out[name] = f"raised {type(exc).__name__}"
write_result({"records": records, "outcome": out})
"""


def test_the_engine_death_line_is_megatron_cores_own(upstream):
    """NeMo RL's Megatron generation (7ea279a) runs Megatron-Core's dynamic inference engine, whose loop
    (``DynamicInferenceEngine.run_engine_with_coordinator``, and ``run_engine``) is wrapped in
    ``trace_async_exceptions``; when it fails, the decorator logs "Exception in async function NAME: ERROR" and
    raises SystemExit in the loop. On one H100 the worker process lived on and NeMo RL waited on the engine's
    requests until the job's timeout. :func:`nemo_rl.engine_death` must read the line that decorator writes, and both engine loops must
    still be wrapped in it (the pinned Megatron-LM's source, ``ast``)."""
    import ast

    got = upstream.run(_ENGINE_DEATH)
    assert len(got["records"]) == 2, got
    for rec in got["records"]:
        assert nemo_rl.engine_death(rec) == "No module named 'flash_attn'", rec
    assert set(got["outcome"].values()) == {"SystemExit(1)"}, got["outcome"]  # the task ends; nothing re-raised
    engine = upstream.megatron_lm / "megatron/core/inference/engines/dynamic_engine.py"
    tree = ast.parse(engine.read_text(encoding="utf-8"))
    wrapped = {n.name for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef)
               and any(ast.unparse(d) == "trace_async_exceptions" for d in n.decorator_list)}
    assert {"run_engine_with_coordinator", "run_engine"} <= wrapped, wrapped
