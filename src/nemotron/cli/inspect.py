"""``data inspect PATH`` and ``why [JOB]``: the reports, as text or one JSON document."""

from __future__ import annotations

import sys
from typing import Any

from nemotron import report
from nemotron.cli import jsonout


def inspect_command(kw: dict[str, Any]) -> int:
    """``nemotron RECIPE data inspect PATH [...]``. Exit 0; 2 for a path or option that does not fit."""
    from nemotron.data.inspect import inspect_path

    colour = sys.stdout.isatty() and not kw.get("as_json")
    with jsonout.quiet_stdout() if kw.get("as_json") else _Nothing():
        doc = inspect_path(kw["path"], kw.get("count") or 3, split=kw.get("split"), step=kw.get("step"), gbs=kw.get("global_batch_size"),
                           seq=kw.get("seq_length"), train_iters=kw.get("train_iters"),
                           train_samples=kw.get("train_samples"), seed=kw.get("seed"), colour=colour)
        if kw.get("as_json"):
            jsonout.emit("data-inspect", doc)
            return 0
    _print_inspect(doc)
    return 0


def _print_inspect(doc: dict[str, Any]) -> None:
    out = lambda text: report.out(text, plain=True)  # noqa: E731
    if doc["kind"] == "sft":
        report.table(f"packed SFT {doc['path']}", ["packs", "pack size", "tokens", "learned", "fill", "no learned token",
                                                   "pad run", "document cut"],
                     [[doc["packs"], doc["pack_size"], doc["tokens"], doc["learned_tokens"], f"{doc['fill']:.1%}",
                       doc["flags"]["no_learned_token"], doc["flags"]["pad_run"], doc["flags"]["document_cut"]]])
        out("learned tokens are in [[...]] (green on a terminal); the rest is masked" +
            ("; {text:<|im_end|>} is a control-token string a message holds as text (ordinary tokens, not the "
             "control token)" if doc["decoded"] else "; token ids shown: no tokenizer folder next to the file"))
        for p in doc["shown"]:
            report.heading(f"pack {p['index']}: {p['tokens']} tokens, {len(p['documents'])} documents, "
                           f"{p['learned']} learned, fill {p['fill']:.1%}" + (f", flags: {', '.join(p['flags'])}" if p['flags'] else ""))
            for n, d in enumerate(p["documents"]):
                held = d.get("control_text") or 0
                out(f"── document {n}: tokens [{d['start']}, {d['end']}), {d['learned']} learned"
                    + (f", {held} control-token string(s) as text" if held else ""))
                out(d["text"])
    elif doc["kind"] == "pretrain":
        run = doc.get("run")
        for split, rows in doc["datasets"].items():
            achieved = run is not None and split == "train"
            report.table(f"{split} split of {doc['path']}: datasets",
                         ["dataset", "shards", "documents", "tokens", "token share", "weight share",
                          *(["achieved share"] if achieved else [])],
                         [[d["dataset"], d["prefixes"], f"{d['documents']:,}", f"{d['tokens']:,}", f"{d['token_share']:.1%}",
                           f"{d['weight_share']:.1%}", *([f"{d['sample_share']:.2%} ({d['samples']:,} samples)"] if achieved else [])]
                          for d in rows])
        if run is None:
            out("achieved shares need the run: --global-batch-size, --seq-length and --train-iters")
        else:
            out(f"achieved share: of the run's {run['train_samples']:,} train samples of {run['seq_length']} tokens, "
                "the fraction each dataset supplies in Megatron-Core's blend")
        b = doc.get("batch")
        if b:
            report.heading(f"global batch of step {b['step']}: blend samples {b['first_sample']}.."
                           f"{b['first_sample'] + b['global_batch_size'] - 1} (seq {b['seq_length']}, "
                           f"{b['train_samples']:,} train samples, seed {b['seed']})")
            report.table(None, ["sample", "dataset", "its sample", "documents (doc:offset+tokens)", "sha256 of the ids"],
                         [[s["index"], "/".join(s["prefix"].rsplit("/", 2)[-2:]), s["dataset_sample"],
                           " ".join(f"{p['document']}:{p['offset']}+{p['tokens']}" for p in s["parts"][:6])
                           + (f" ... +{len(s['parts']) - 6} more" if len(s["parts"]) > 6 else ""),
                           s["sha256"][:16]] for s in b["samples"]])
            out("doc:offset+tokens = document index in the prefix's .idx, first token, tokens taken (seq + 1 per "
                "sample, as Megatron reads them); --json lists every part and the full SHA-256 of the int64 ids")
            for s in b["samples"]:
                if s.get("preview"):
                    report.heading(f"sample {s['index']} ({'/'.join(s['prefix'].rsplit('/', 2)[-2:])}): its first "
                                   "200 tokens")
                    out(s["preview"])
    else:
        c = doc["check"]
        report.table(f"RL prompts {doc['path']}", ["records", "checker", "parsed", "as a number", "rewarded",
                                                    "wrong value rejected"],
                     [[doc["records"], doc["checker"] or "none (pip install 'nemotron-cli[inspect]')",
                       *(["-"] * 4 if c is None else [c["parsed"], c["numeric"], c["rewarded"], c["wrong_rejected"]])]])
        if doc.get("form") == "chat-messages":
            out(f"note: {doc['untasked']:,} of {doc['records']:,} lines have no 'task' field: chat messages, not a "
                "data prep rl output; read as RL prompts (the user turn as the prompt, the assistant turn as the "
                "reference answer)")
        else:
            out("form: data prep rl output (messages [user, assistant] and task)")
        if c and c["failed_lines"]:
            out(f"{c['failed']} reference answers fail the check (cannot reward a policy right); lines "
                f"{', '.join(map(str, c['failed_lines']))}")
        for s in doc["shown"]:
            report.heading(f"line {s['line']}")
            out(f"prompt: {s['prompt'][:400]}")
            chk = s["check"]
            out(f"answer: {s['answer']}" + ("" if chk is None else "   check: " + ", ".join(
                f"{k}={'yes' if v else 'NO'}" for k, v in chk.items())))


def why_command(ident: str | None, logs: list[str], as_json: bool) -> int:
    """``nemotron RECIPE why [JOB] [--log FILE]``. Exit 0 when it named a cause; 1 when none of the known ones."""
    from nemotron.launch import why

    with jsonout.quiet_stdout() if as_json else _Nothing():
        if not logs and ident is None:
            from nemotron.cli.pipeline import note_newer_shell_run
            from nemotron.launch import jobs, records

            if records.latest_shell_run() is None:  # else why explains that run, from its run folder
                note_newer_shell_run(jobs.load(None))
        verdict = why.explain_files(logs) if logs else why.explain_job(ident)
        if as_json:
            jsonout.emit("why", verdict)
            return 0
    report.table(f"why: {verdict['job'] or ', '.join(verdict['sources'])}", ["", ""],
                 [["state" if verdict["cause"] == "running" else "ended", verdict["state"] or "-"], ["cause", verdict["cause"]], ["evidence", verdict["evidence"] or "-"],
                  ["fix", verdict["hint"] or "-"], *([["our frame", verdict["frame"]]] if verdict.get("frame") else [])])
    for other in verdict.get("also", []):
        report.out(f"also seen: {other['cause']}: {other['evidence']}", plain=True)
    return 0


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


__all__ = ["inspect_command", "why_command"]
