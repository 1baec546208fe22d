"""Chat data for SFT: one conversation form, the Nemotron 3 chat template, assistant-only loss masks.

Three steps, each usable alone (the tests pin every one of them):

1. :func:`normalise` turns a record in any supported form into one list of messages::

       [{"role": "system", "content": str},                       # always first ("" when none)
        {"role": "user" | "tool" | "system", "content": str},
        {"role": "assistant", "content": str,                      # stripped, like the template does
         "reasoning_content": str (optional), "tool_calls": [{"type": "function",
         "function": {"name": str, "arguments": dict}}] (optional)}, ...]

   plus the conversation's ``tools`` (function schemas) or ``None``. Forms: OpenAI ``messages``
   (``reasoning_content``/``reasoning``, ``tool_calls`` with JSON-string or object arguments, a
   ``tools`` list), ShareGPT ``conversations`` (``from``/``value``), Alpaca ``instruction`` /
   ``input`` / ``output`` (or ``response``). Reasoning written inline as ``<think>...</think>`` at
   the start of an assistant answer is moved to ``reasoning_content``. Problems raise
   :class:`RecordProblem` with a summary reason (see :data:`REASONS`) unless a policy repairs them.

2. :func:`training_samples` decides which assistant turns each training sample learns. The released
   template drops the reasoning of assistant turns before the last user turn
   (``truncate_history_thinking``), so a conversation with reasoning is split into one sample per
   user turn, each learning only the turns after its last user turn (``history_reasoning: split``,
   as NVIDIA's own SFT data prep does), or rendered once with every turn's reasoning kept
   (``keep``). A conversation without reasoning is one sample that learns every assistant turn.

3. :func:`segment` renders a sample with our template and cuts the text into context and learned
   pieces. A learned piece is what the model must produce after the generation prompt the template
   itself writes at inference time (``<|im_start|>assistant\\n<think>\\n`` with reasoning,
   ``<|im_start|>assistant\\n<think></think>`` without): the reasoning, ``</think>``, the answer, the
   tool calls and the closing ``<|im_end|>``. It is found by rendering the conversation up to each
   learned turn (with the matching generation prompt) and up to its end, and both renderings must
   be prefixes of the full one — otherwise :class:`TemplateMismatch` (never a silent drop). In practice
   the conversation is rendered once and the spans read off it at the assistant headers, which gives the
   same pieces (checked per template on probe conversations; :func:`segment_by_prefixes` otherwise).
   :func:`tokenize_samples` encodes the pieces (the template's control tokens recognised) into ids and a
   per-token learned flag, with the token positions where each learned turn ends (after its ``\\n``) for
   truncation at a turn boundary.

Control-token strings inside message text (a user quoting ``</s>``, an answer quoting ``<|im_end|>``) are data:
:class:`ControlText` hides them from the template and :func:`tokenize_samples` encodes them as plain text
(``policies.control_token_text: text``), or :func:`check_control_text` refuses the record (``skip`` / ``fail``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from nemotron.errors import ConfigError

CHAT_SCHEMAS = ("messages", "sharegpt", "alpaca", "transcript")
#: The record shapes the SFT stage reads, as messages name them.
ACCEPTED_SHAPES = ("OpenAI 'messages' [{role, content}], ShareGPT 'conversations' [{from, value}], Alpaca "
                   "'instruction'/'input'/'output', or a transcript text field (text, transcript, dialogue, chat, "
                   "conversation) with 'User:'/'Assistant:' speaker prefixes")
#: Text fields a transcript record may keep its turns in (the first one present is read).
TRANSCRIPT_FIELDS = ("text", "transcript", "dialogue", "chat", "conversation")
#: Speaker prefixes of a transcript (a line starting with one of them, then ``:``, starts a turn), by role;
#: matched case-insensitively, optionally after ``#``/``*`` markers (``### Human:``, ``**User:**``).
TRANSCRIPT_SPEAKERS = {
    "system": ("system",),
    "user": ("user", "human", "question", "prompt", "customer", "patient", "student"),
    "assistant": ("assistant", "gpt", "ai", "bot", "model", "chatbot", "answer", "agent", "response"),
}
_SPEAKER_ROLE = {name: role for role, names in TRANSCRIPT_SPEAKERS.items() for name in names}
_SPEAKER_LINE = re.compile(r"^[ \t]*(?:#+[ \t]*|\*\*)?(" + "|".join(sorted(_SPEAKER_ROLE, key=len, reverse=True))
                           + r")[ \t]*(?:\*\*)?[ \t]*:(?:\*\*)?[ \t]?", re.I | re.M)
#: Summary reasons of records that become no training sample (each counted, each message names file:line).
REASONS = ("bad_record", "unknown_role", "empty_content", "consecutive_same_role", "no_assistant_turn",
           "control_token_text", "template_mismatch", "too_long")
#: Tokens the Nemotron 3 chat format needs as single tokens of the vocabulary.
CHAT_TOKENS = ("<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
               "<tool_response>", "</tool_response>")
REQUIRED_TOKENS = ("<|im_start|>", "<|im_end|>", "<think>", "</think>")
_END = "<|im_end|>"

_ROLE_ALIASES = {
    "system": "system", "developer": "system",
    "user": "user", "human": "user",
    "assistant": "assistant", "gpt": "assistant", "model": "assistant", "chatgpt": "assistant",
    "tool": "tool", "function": "tool", "observation": "tool", "function_response": "tool", "ipython": "tool",
}


class RecordProblem(Exception):
    """A record that yields no sample: ``reason`` (one of :data:`REASONS`) and a short ``detail``."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class TemplateMismatch(RecordProblem):
    """Rendering a conversation prefix does not reproduce the start of the full rendering."""

    def __init__(self, detail: str) -> None:
        super().__init__("template_mismatch", detail)


@dataclass(frozen=True)
class ChatPolicy:
    """How :func:`normalise` treats repairable problems (the stage's ``policies`` and ``chat`` keys)."""

    consecutive_same_role: str = "merge"      # merge | skip
    reasoning: str = "auto"                   # auto (as each record says) | off (reasoning removed)


# --------------------------------------------------------------------------------------------------
# 1. normalise


def map_fields(obj: dict[str, Any], fields: dict[str, str] | None) -> dict[str, Any]:
    """``obj`` with the fields a dataset's ``fields`` map names read from the record's own fields: ``{"text":
    "chosen"}`` reads a preference record's ``chosen`` transcript as the transcript ``text``, ``{"messages":
    "chosen"}`` a ``chosen`` list of messages (a dotted name reads a nested field). Unchanged without a map.

    Raises:
        RecordProblem: ``bad_record``: the record has no field the map names.
    """
    if not fields:
        return obj
    out = dict(obj)
    for form_field, record_field in fields.items():
        value: Any = obj.get(record_field)
        if value is None and "." in record_field:
            value = obj
            for part in record_field.split("."):
                value = value.get(part) if isinstance(value, dict) else None
        if value is None:
            keys = ", ".join(repr(k) for k in list(obj)[:8]) or "none"
            raise RecordProblem("bad_record", f"no field {record_field!r} (the dataset's fields map reads "
                                              f"{form_field!r} from it; the record's fields: {keys})")
        out[form_field] = value
    return out


def detect_schema(obj: dict[str, Any]) -> str | None:
    """The chat form of a record: ``messages``, ``sharegpt``, ``alpaca``, ``transcript`` (a text field of
    :data:`TRANSCRIPT_FIELDS` that starts with a speaker prefix, :data:`TRANSCRIPT_SPEAKERS`) or ``None``."""
    if isinstance(obj.get("messages"), list):
        return "messages"
    if isinstance(obj.get("conversations"), list) or isinstance(obj.get("conversation"), list):
        return "sharegpt"
    if "instruction" in obj:
        return "alpaca"
    text = _transcript_text(obj)
    if text is not None and _SPEAKER_LINE.match(text.lstrip("\ufeff\n\r ")):
        return "transcript"
    return None


def _transcript_text(obj: dict[str, Any]) -> str | None:
    for name in TRANSCRIPT_FIELDS:
        if isinstance(obj.get(name), str):
            return obj[name]
    return None


def _transcript(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The turns of a transcript record.

    A line that starts with a speaker prefix (``User:``, ``Assistant:``, ``### Human:``, ... see
    :data:`TRANSCRIPT_SPEAKERS`) starts a turn only when it is one of the transcript's own speaker labels
    (:func:`transcript_speakers`: learnt from the record, spelt exactly as it spells them); the text up to the
    next such line (stripped) is the turn's content. Any other ``Word:`` line (``Answer: 42`` inside a user turn,
    ``    model: str`` in code) is content. Text before the first prefix is a problem.

    Raises:
        RecordProblem: ``bad_record``: no text field, no speaker prefix, text before the first one, or speaker
            labels that cannot be told apart (the transcript's line is named).
    """
    text = _transcript_text(obj)
    if text is None:
        raise RecordProblem("bad_record", f"no transcript text field ({', '.join(TRANSCRIPT_FIELDS)})")
    text = text.lstrip("\ufeff")
    marks = list(_SPEAKER_LINE.finditer(text))
    if not marks:
        raise RecordProblem("bad_record", "the transcript has no speaker prefix (User:, Assistant:, ...) "
                                          f"at a line start: {preview(text)}")
    if text[:marks[0].start()].strip():
        raise RecordProblem("bad_record", f"text before the first speaker prefix: {preview(text[:marks[0].start()])}")
    speakers = transcript_speakers(text, marks)
    marks = [m for m in marks if _label(m) in speakers]
    out = []
    for k, m in enumerate(marks):
        end = marks[k + 1].start() if k + 1 < len(marks) else len(text)
        out.append({"role": speakers[_label(m)], "content": text[m.end():end].strip()})
    return out


#: Speaker names that chat transcripts use as labels; the others (``Question``, ``Answer``, ``Model``, ``Agent``
#: ...) are as often words inside a turn, so they become a speaker label only where nothing else can.
_CHAT_SPEAKERS = frozenset({"system", "user", "human", "assistant", "gpt", "ai", "bot", "chatbot"})


def _label(m: re.Match[str]) -> str:
    """A speaker line's label exactly as written (indentation, ``###``/``**`` markers, the name's case)."""
    return m.group(0).rstrip(" \t")


def _style(m: re.Match[str]) -> tuple[str, str]:
    label = _label(m)
    return label[:m.start(1) - m.start()], label[m.end(1) - m.start():]


def transcript_speakers(text: str, marks: list[re.Match[str]] | None = None) -> dict[str, str]:
    """The speaker labels of a transcript, learnt from the record: ``{label as written: role}``.

    The first line's label is a speaker (``System:`` first: then one user and one assistant label follow).
    For each role still missing, the labels of that role in the text are the candidates: one is the speaker;
    of several, the one written like the first label (same markers), else the one usual in chat transcripts
    (``User``, ``Human``, ``Assistant``, ``GPT``, ``AI``, ``Bot``, ``Chatbot``, ``System``) is. A label of a role
    that already has its speaker is content (``Question:`` inside a ``User:`` turn).

    Raises:
        RecordProblem: ``bad_record`` when two candidate labels remain for one role (both named with the
            transcript line where each first appears).
    """
    marks = list(_SPEAKER_LINE.finditer(text)) if marks is None else marks
    if not marks:
        return {}
    first = marks[0]
    role1 = _SPEAKER_ROLE[first.group(1).lower()]
    speakers = {_label(first): role1}
    wanted = ("user", "assistant") if role1 == "system" else ("assistant",) if role1 == "user" else ("user",)
    for role in wanted:
        seen: dict[str, re.Match[str]] = {}
        for m in marks[1:]:
            if _SPEAKER_ROLE[m.group(1).lower()] == role and _label(m) not in seen:
                seen[_label(m)] = m
        cands = list(seen.values())
        for narrow in (lambda m: _style(m) == _style(first), lambda m: m.group(1).lower() in _CHAT_SPEAKERS):
            if len(cands) > 1 and any(narrow(m) for m in cands):
                cands = [m for m in cands if narrow(m)]
        if len(cands) > 1:
            a, b = cands[:2]
            raise RecordProblem("bad_record", f"transcript lines {_line_of(text, a)} and {_line_of(text, b)}: "
                                              f"{_label(a)!r} and {_label(b)!r} could each be the {role}'s speaker "
                                              "label; write the turns as 'messages' (role, content)")
        if cands:
            speakers[_label(cands[0])] = role
    return speakers


def _line_of(text: str, m: re.Match[str]) -> int:
    return text.count("\n", 0, m.start()) + 1


def preview(value: Any, limit: int = 160) -> str:
    """``value`` as one line of at most ``limit`` characters (JSON for a record; ``...`` where cut), for a
    message that shows the record it is about."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[:limit - 3] + "...")


def normalise(obj: dict[str, Any], schema: str | None, policy: ChatPolicy = ChatPolicy()) -> tuple[list[dict[str, Any]], list[Any] | None]:
    """One record as ``(messages, tools)`` (see the module docstring).

    Args:
        obj: the parsed record.
        schema: one of :data:`CHAT_SCHEMAS`, or ``None`` to detect it from the record's fields.
        policy: repairs to apply.

    Raises:
        RecordProblem: the record yields no conversation (reason and detail say why).
    """
    form = schema or detect_schema(obj)
    if form == "messages":
        raw = obj.get("messages")
    elif form == "sharegpt":
        raw = obj.get("conversations") if isinstance(obj.get("conversations"), list) else obj.get("conversation")
    elif form == "alpaca":
        raw = _alpaca(obj)
    elif form == "transcript":
        raw = _transcript(obj)
    else:
        keys = ", ".join(repr(k) for k in list(obj)[:8]) + (", ..." if len(obj) > 8 else "") if obj else "none"
        raise RecordProblem("bad_record", f"a record of no chat shape the SFT stage reads (fields: {keys}): "
                                          f"{preview(obj)}; accepted: {ACCEPTED_SHAPES}")
    if not isinstance(raw, list) or not raw:
        raise RecordProblem("bad_record", f"the {form} field is empty or not a list")
    tools = _tools(obj.get("tools"))
    msgs = [_message(m, i) for i, m in enumerate(raw)]
    if form == "sharegpt" and isinstance(obj.get("system"), str) and obj["system"].strip() and msgs[0]["role"] != "system":
        msgs.insert(0, {"role": "system", "content": obj["system"]})
    if policy.reasoning == "off":
        for m in msgs:
            m.pop("reasoning_content", None)
    # empty turns: an empty system prompt renders exactly like none; anything else empty is a problem
    kept = []
    for i, m in enumerate(msgs):
        empty = not m["content"].strip()
        if m["role"] == "assistant":
            empty = empty and not m.get("reasoning_content") and not m.get("tool_calls")
        if empty and m["role"] == "system":
            continue
        if empty:
            raise RecordProblem("empty_content", f"message {i} ({m['role']}) is empty")
        kept.append(m)
    msgs = _merge_same_roles(kept, policy)
    while msgs and msgs[-1]["role"] != "assistant":
        msgs.pop()
    if not any(m["role"] == "assistant" for m in msgs):
        roles = " > ".join(m["role"] for m in kept) or "none"
        raise RecordProblem("no_assistant_turn", f"the conversation has no assistant turn to learn (turns: {roles}): "
                                                 f"{preview(obj)}; SFT learns assistant answers: a prompt-only record "
                                                 "belongs in data prep rl, or give each prompt its answer")
    if msgs[0]["role"] != "system":
        msgs.insert(0, {"role": "system", "content": ""})
    return msgs, tools


def _alpaca(obj: dict[str, Any]) -> list[dict[str, Any]]:
    instruction = obj.get("instruction")
    extra = obj.get("input")
    answer = obj.get("output", obj.get("response"))
    if not isinstance(instruction, str):
        raise RecordProblem("bad_record", "'instruction' is missing or not text")
    if extra is not None and not isinstance(extra, str):
        raise RecordProblem("bad_record", "'input' is not text")
    if not isinstance(answer, str):
        raise RecordProblem("bad_record", "no 'output' (or 'response') text")
    prompt = instruction if not (extra and extra.strip()) else f"{instruction}\n\n{extra}"
    out = [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]
    if isinstance(obj.get("system"), str) and obj["system"].strip():
        out.insert(0, {"role": "system", "content": obj["system"]})
    return out


def _text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and part.get("type", "text") == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise RecordProblem("bad_record", f"{where}: content part of type {kind!r} is not text")
        return "".join(parts)
    raise RecordProblem("bad_record", f"{where}: content is {type(content).__name__}, not text")


_INLINE_THINK = re.compile(r"\A\s*<think>\n?(.*?)</think>(.*)\Z", re.S)


def _message(m: Any, i: int) -> dict[str, Any]:
    if not isinstance(m, dict):
        raise RecordProblem("bad_record", f"message {i} is not an object")
    role_raw = m.get("role", m.get("from"))
    content_raw = m["content"] if "content" in m else m.get("value")
    if not isinstance(role_raw, str):
        raise RecordProblem("bad_record", f"message {i} has no role")
    role = _ROLE_ALIASES.get(role_raw.strip().lower())
    if role is None:
        raise RecordProblem("unknown_role", f"message {i} has role {role_raw!r}")
    out: dict[str, Any] = {"role": role, "content": _text(content_raw, f"message {i}")}
    if role != "assistant":
        return out
    reasoning = m.get("reasoning_content", m.get("reasoning"))
    if reasoning is not None and not isinstance(reasoning, str):
        raise RecordProblem("bad_record", f"message {i}: reasoning_content is not text")
    inline = _INLINE_THINK.match(out["content"])
    if inline and not (reasoning and reasoning.strip()):
        reasoning, out["content"] = inline.group(1), inline.group(2)
    out["content"] = out["content"].strip()
    if reasoning and reasoning.strip():
        out["reasoning_content"] = reasoning
    calls = m.get("tool_calls")
    if calls:
        if not isinstance(calls, list):
            raise RecordProblem("bad_record", f"message {i}: tool_calls is not a list")
        out["tool_calls"] = [_tool_call(c, i, j) for j, c in enumerate(calls)]
    return out


def _tool_call(c: Any, i: int, j: int) -> dict[str, Any]:
    fn = c.get("function", c) if isinstance(c, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise RecordProblem("bad_record", f"message {i}: tool_calls[{j}] has no function name")
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            raise RecordProblem("bad_record", f"message {i}: tool_calls[{j}] arguments are not JSON ({exc.msg})") from None
    if not isinstance(args, dict):
        raise RecordProblem("bad_record", f"message {i}: tool_calls[{j}] arguments are not an object")
    return {"type": "function", "function": {"name": fn["name"], "arguments": args}}


def _tools(value: Any) -> list[Any] | None:
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise RecordProblem("bad_record", f"'tools' is not JSON ({exc.msg})") from None
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise RecordProblem("bad_record", "'tools' must be a list of function schemas")
    for k, t in enumerate(value):
        fn = t.get("function", t)
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise RecordProblem("bad_record", f"tools[{k}] has no function name")
    return value or None


def _merge_same_roles(msgs: list[dict[str, Any]], policy: ChatPolicy) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, m in enumerate(msgs):
        prev = out[-1] if out else None
        if prev is None or prev["role"] != m["role"] or m["role"] == "tool":  # consecutive tool results are normal
            out.append(m)
            continue
        if policy.consecutive_same_role != "merge":
            raise RecordProblem("consecutive_same_role", f"messages {i - 1} and {i} are both {m['role']}")
        merged = dict(prev)
        merged["content"] = "\n\n".join(x for x in (prev["content"], m["content"]) if x)
        if m["role"] == "assistant":
            thoughts = [x for x in (prev.get("reasoning_content"), m.get("reasoning_content")) if x]
            if thoughts:
                merged["reasoning_content"] = "\n\n".join(thoughts)
            calls = (prev.get("tool_calls") or []) + (m.get("tool_calls") or [])
            if calls:
                merged["tool_calls"] = calls
        out[-1] = merged
    return out


# --------------------------------------------------------------------------------------------------
# 2. which turns a sample learns


@dataclass(frozen=True)
class Sample:
    """One training sequence: the messages rendered, the first message index it learns, template switches."""

    messages: list[dict[str, Any]]
    first_learned: int
    keep_history_reasoning: bool = False


def training_samples(msgs: list[dict[str, Any]], history_reasoning: str = "split") -> list[Sample]:
    """The training samples of one normalised conversation (see the module docstring)."""
    reasoning = any(m["role"] == "assistant" and m.get("reasoning_content") for m in msgs)
    if not reasoning:
        return [Sample(msgs, 0)]
    if history_reasoning == "keep":
        return [Sample(msgs, 0, keep_history_reasoning=True)]
    users = [i for i, m in enumerate(msgs) if m["role"] == "user"]
    out = []
    for k, u in enumerate(users):
        end = users[k + 1] if k + 1 < len(users) else len(msgs)
        sub = msgs[:end]
        while sub and sub[-1]["role"] != "assistant":
            sub = sub[:-1]
        if any(m["role"] == "assistant" for m in sub[u + 1:]):
            out.append(Sample(sub, u + 1))
    return out


# --------------------------------------------------------------------------------------------------
# 3. render and segment


class ChatTemplate:
    """A chat template compiled the way Hugging Face tokenizers compile theirs (sandboxed Jinja with
    ``trim_blocks``/``lstrip_blocks``, the loop-control extension, a ``tojson`` that keeps non-ASCII
    text, ``raise_exception``), so a template renders here exactly as ``apply_chat_template`` would."""

    def __init__(self, text: str, name: str = "<template>") -> None:
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
                   sort_keys: bool = False) -> str:
            return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

        def raise_exception(message: str) -> None:
            raise jinja2.exceptions.TemplateError(message)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        try:
            self._template = env.from_string(text)
        except jinja2.TemplateSyntaxError as exc:
            raise ConfigError(f"{name}:{exc.lineno}: chat template syntax error: {exc.message}") from None
        self.name = name
        self.text = text
        self._one_render: bool | None = None

    def render(self, messages: list[dict[str, Any]], tools: list[Any] | None = None,
               add_generation_prompt: bool = False, **switches: Any) -> str:
        return self._template.render(messages=messages, tools=tools, add_generation_prompt=add_generation_prompt,
                                     **switches)

    def one_render_agrees(self) -> bool:
        """Whether this template's learned spans may be read off one rendering (:func:`one_render_spans`):
        on a fixed set of probe conversations (:data:`_PROBES`) they equal the spans of the definition
        (:func:`segment_by_prefixes`). Checked once per template object; a template that fails (or renders
        a probe with an error) is always segmented by its prefixes."""
        if self._one_render is None:
            self._one_render = _probe_agrees(self)
        return self._one_render


@lru_cache(maxsize=4)
def load_template(path: str) -> ChatTemplate:
    """The chat template file at ``path`` (compiled once per process).

    Raises:
        ConfigError: the file is missing or is not a valid template.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"chat.template={path}: cannot read ({exc.strerror or exc})") from None
    return ChatTemplate(text, path)


@dataclass
class Segmented:
    """A rendered sample cut into pieces: ``pieces[i]`` is learned when ``learned[i]``; a learned
    turn is followed by a one-character ``"\\n"`` piece, after which the turn ends."""

    text: str
    pieces: list[str] = field(default_factory=list)
    learned: list[bool] = field(default_factory=list)


def segment(template: ChatTemplate, sample: Sample, tools: list[Any] | None) -> Segmented:
    """Render ``sample`` and cut it into context and learned pieces (see the module docstring).

    The conversation is rendered once; each learned turn's span is found in that text from its assistant
    header (:func:`one_render_spans`). Where that cannot be relied on — a message that carries a chat
    control token as text, a template whose output is not one ``<|im_start|>assistant`` block per assistant
    message, or a template that fails :meth:`ChatTemplate.one_render_agrees` — the spans come from rendering
    the conversation up to each learned turn, with and without the generation prompt, as the definition
    says (:func:`segment_by_prefixes`). Both give the same pieces wherever the first applies.

    Raises:
        TemplateMismatch: a prefix rendering is not a prefix of the full rendering, or a learned
            turn does not end with ``<|im_end|>\\n``.
        RecordProblem: ``bad_record`` when the template itself fails on the record.
    """
    full = _render_full(template, sample, tools)
    spans = one_render_spans(full, sample, tools) if template.one_render_agrees() else None
    if spans is None:
        return segment_by_prefixes(template, sample, tools, full)
    return _cut(full, spans)


def _render_full(template: ChatTemplate, sample: Sample, tools: list[Any] | None) -> str:
    import jinja2

    try:
        return template.render(sample.messages, tools, truncate_history_thinking=not sample.keep_history_reasoning)
    except (jinja2.TemplateError, TypeError, ValueError) as exc:
        raise RecordProblem("bad_record", f"the chat template cannot render it ({type(exc).__name__}: {exc})") from None


def _cut(full: str, spans: list[tuple[int, int]]) -> Segmented:
    """``full`` cut at the learned ``[start, end)`` spans (each followed by its one-character ``"\\n"`` piece)."""
    out = Segmented(full)
    pos = 0
    for start, end in spans:
        out.pieces += [full[pos:start], full[start:end], "\n"]
        out.learned += [False, True, False]
        pos = end + 1
    if pos < len(full):
        out.pieces.append(full[pos:])
        out.learned.append(False)
    return out


_HEADER = "<|im_start|>assistant\n"
_CONTROL = ("<|im_start|>", _END, "<think>", "</think>")


def one_render_spans(full: str, sample: Sample, tools: list[Any] | None) -> list[tuple[int, int]] | None:
    """The learned ``[start, end)`` character spans of ``sample`` in its one rendering ``full``, or ``None``
    where they cannot be read off it.

    Assistant message ``k`` (in order) is the ``k``-th ``<|im_start|>assistant\\n`` of ``full``; its learned
    span starts after the generation prompt (that header, then ``<think>\\n`` when the turn has reasoning,
    else ``<think></think>``) and ends after the first ``<|im_end|>`` that follows, which must be followed by
    ``\\n``. ``None`` when a message, tool call or tool schema holds a chat control token as text
    (``<|im_start|>``, ``<|im_end|>``, ``<think>``, ``</think>``: the markers would be ambiguous, and the
    template treats think tags in answers specially), when the headers do not match the assistant messages
    one to one, or a learned turn does not start or end as described.
    """
    msgs = sample.messages
    for m in msgs:
        for key in ("content", "reasoning_content"):
            text = m.get(key)
            if isinstance(text, str) and any(c in text for c in _CONTROL):
                return None
        if m.get("tool_calls") and any(c in json.dumps(m["tool_calls"], ensure_ascii=False) for c in _CONTROL):
            return None
    if tools and any(c in json.dumps(tools, ensure_ascii=False) for c in _CONTROL):
        return None
    heads = []
    at = full.find(_HEADER)
    while at >= 0:
        heads.append(at)
        at = full.find(_HEADER, at + 1)
    assistants = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
    if len(heads) != len(assistants):
        return None
    spans = []
    for b, i in zip(heads, assistants, strict=True):
        if i < max(sample.first_learned, 1):
            continue
        head = _HEADER + ("<think>\n" if msgs[i].get("reasoning_content") else "<think></think>")
        if not full.startswith(head, b):
            return None
        start = b + len(head)
        close = full.find(_END, start)
        if close < 0:
            return None
        end = close + len(_END)
        if full[end:end + 1] != "\n" or end <= start:
            return None
        spans.append((start, end))
    return spans


def segment_by_prefixes(template: ChatTemplate, sample: Sample, tools: list[Any] | None,
                        full: str | None = None) -> Segmented:
    """:func:`segment` by definition: the conversation rendered up to each learned turn with the matching
    generation prompt, and up to its end; both must be prefixes of the full rendering ``full`` (rendered
    here when not given).

    Raises:
        TemplateMismatch, RecordProblem: as :func:`segment`.
    """
    switches = {"truncate_history_thinking": not sample.keep_history_reasoning}
    msgs = sample.messages
    if full is None:
        full = _render_full(template, sample, tools)
    spans: list[tuple[int, int]] = []
    pos = 0
    for i in range(max(sample.first_learned, 1), len(msgs)):
        m = msgs[i]
        if m["role"] != "assistant":
            continue
        think = bool(m.get("reasoning_content"))
        prompt = template.render(msgs[:i], tools, add_generation_prompt=True, enable_thinking=think, **switches)
        upto = template.render(msgs[: i + 1], tools, **switches)
        if not full.startswith(prompt):
            raise TemplateMismatch(f"rendering up to message {i} with the generation prompt is not a prefix of the "
                                   f"whole conversation (differs at character {_first_difference(prompt, full)})")
        if not full.startswith(upto) or len(upto) <= len(prompt) or not upto.endswith(_END + "\n"):
            raise TemplateMismatch(f"rendering up to the end of message {i} is not a prefix of the whole conversation "
                                   f"ending with {_END!r}")
        start, end = len(prompt), len(upto) - 1
        if start < pos:
            raise TemplateMismatch(f"message {i} starts inside the previous learned turn")
        spans.append((start, end))
        pos = end + 1
    return _cut(full, spans)


#: Conversations on which a template's one-render spans are compared with the definition
#: (:meth:`ChatTemplate.one_render_agrees`): plain turns, several turns, reasoning (history dropped and
#: kept), tool calls with their results, and a system prompt with tool schemas.
_PROBES: tuple[tuple[list[dict[str, Any]], list[Any] | None], ...] = (
    ([{"role": "system", "content": ""}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}], None),
    ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
      {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}], None),
    ([{"role": "system", "content": ""}, {"role": "user", "content": "2+2?"},
      {"role": "assistant", "content": "4", "reasoning_content": "Add them."}, {"role": "user", "content": "3+3?"},
      {"role": "assistant", "content": "6", "reasoning_content": "Add again."}], None),
    ([{"role": "system", "content": ""}, {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "w", "arguments": {"c": "x"}}}]},
      {"role": "tool", "content": "sun"}, {"role": "tool", "content": "warm"}, {"role": "assistant", "content": "Sunny."}],
     [{"type": "function", "function": {"name": "w", "description": "d", "parameters": {"type": "object",
                                         "properties": {"c": {"type": "string"}}, "required": ["c"]}}}]),
)


def _probe_agrees(template: ChatTemplate) -> bool:
    for msgs, tools in _PROBES:
        for keep in ("split", "keep"):
            for sample in training_samples(msgs, keep):
                try:
                    want = segment_by_prefixes(template, sample, tools)
                except RecordProblem:
                    return False
                full = _render_full(template, sample, tools)
                spans = one_render_spans(full, sample, tools)
                if spans is None:
                    continue
                got = _cut(full, spans)
                if (got.pieces, got.learned) != (want.pieces, want.learned):
                    return False
    return True


def _first_difference(a: str, b: str) -> int:
    n = min(len(a), len(b))
    for k in range(n):
        if a[k] != b[k]:
            return k
    return n


# --------------------------------------------------------------------------------------------------
# control-token strings inside message text

#: Unicode noncharacters (reserved for a program's own use, never interchanged): while the template renders,
#: a control-token string found inside message text is held as ``MARK_OPEN + <its number> + MARK_CLOSE``.
MARK_OPEN, MARK_CLOSE = "\ufdd0", "\ufdd1"
#: Values of ``policies.control_token_text`` (first = default): ``text`` encodes a control-token string
#: found inside message text as plain text; ``skip`` / ``fail`` refuse the record.
CONTROL_TEXT_POLICIES = ("text", "skip", "fail")


def _trie_pattern(words: Any) -> str:
    """A regular expression matching any of ``words``, the longest first where one is a prefix of another,
    written as a prefix tree (a vocabulary's ~1,000 control tokens share prefixes such as ``<SPECIAL_``: the
    tree tries each character once instead of every word in turn)."""
    tree: dict[str, Any] = {}
    for w in words:
        node = tree
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict[str, Any]) -> str:
        ends = "" in node
        branches = [re.escape(ch) + emit(child) for ch, child in sorted(node.items()) if ch]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if ends else body

    return emit(tree)


class ControlText:
    """The control-token strings of a tokenizer (every added token: what its encoder turns into one id
    wherever the string appears) and how message text that holds one is kept as text.

    The template's own control tokens (``<|im_start|>``, ``<|im_end|>``, ``<think>``, ``<tool_call>`` ...)
    stay single tokens; the same strings inside a message's content, reasoning, tool-call arguments or tool
    schemas are hidden from the template (:meth:`hide`: a marked number) and encoded as text
    (:func:`tokenize_samples`), as the pretraining path encodes a literal ``</s>``.

    Args:
        tokens: the control-token strings (``tokenizers.Tokenizer.get_added_tokens_decoder()`` contents).
    """

    def __init__(self, tokens: Any) -> None:
        self.controls = tuple(sorted({t for t in tokens if t}, key=lambda t: (-len(t), t)))
        # the marks themselves are escaped too, so a record holding a noncharacter comes back unchanged
        self.hidden = (*self.controls, MARK_OPEN, MARK_CLOSE)
        self._find = re.compile(_trie_pattern(self.hidden))
        self._split = re.compile("(" + _trie_pattern(self.controls) + ")") if self.controls else None
        self._mark = re.compile(f"{MARK_OPEN}(\\d+){MARK_CLOSE}")
        self._number = {t: i for i, t in enumerate(self.hidden)}

    def first(self, text: str) -> str | None:
        """The first control-token string inside ``text`` (the marks count too), or ``None``."""
        m = self._find.search(text)
        return m.group(0) if m else None

    def hide(self, text: str) -> str:
        """``text`` with each control-token string (and each mark character) replaced by its mark."""
        return self._find.sub(lambda m: f"{MARK_OPEN}{self._number[m.group(0)]}{MARK_CLOSE}", text)

    def restore(self, text: str) -> str:
        """The inverse of :meth:`hide`."""
        return self._mark.sub(lambda m: self.hidden[int(m.group(1))], text)

    def split(self, text: str) -> list[str]:
        """``text`` cut at the control tokens it holds (odd items are the tokens), as a tokenizer's encoder
        cuts its input at its added tokens before the model sees the text between them."""
        return self._split.split(text) if self._split is not None else [text]

    def scan(self, msgs: list[dict[str, Any]], tools: list[Any] | None) -> tuple[str, str] | None:
        """``(where, token)`` of the first control-token string in the text of ``msgs`` / ``tools`` (``where``:
        ``message 2 content``, ``message 3 tool_calls``, ``tools``), or ``None``."""
        for i, m in enumerate(msgs):
            for key in ("content", "reasoning_content", "tool_calls"):
                value = m.get(key)
                if value is None:
                    continue
                text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
                found = self.first(text)
                if found is not None:
                    return f"message {i} ({m['role']}) {key}", found
        if tools:
            found = self.first(json.dumps(tools, ensure_ascii=False))
            if found is not None:
                return "tools", found
        return None

    def protect(self, msgs: list[dict[str, Any]], tools: list[Any] | None) -> tuple[list[dict[str, Any]], list[Any] | None]:
        """``(msgs, tools)`` with every control-token string in their text hidden (:meth:`hide`; keys of
        tool-call arguments and schemas too); the template's own tokens are added when it renders."""
        def deep(value: Any) -> Any:
            if isinstance(value, str):
                return self.hide(value)
            if isinstance(value, list):
                return [deep(v) for v in value]
            if isinstance(value, dict):
                return {deep(k) if isinstance(k, str) else k: deep(v) for k, v in value.items()}
            return value

        out = []
        for m in msgs:
            m = dict(m)
            for key in ("content", "reasoning_content", "tool_calls"):
                if m.get(key) is not None:
                    m[key] = deep(m[key])
            out.append(m)
        return out, (deep(tools) if tools else tools)


def check_control_text(control: ControlText, msgs: list[dict[str, Any]], tools: list[Any] | None,
                       policy: str) -> tuple[list[dict[str, Any]], list[Any] | None, bool]:
    """Apply ``policies.control_token_text`` to one normalised conversation.

    Returns:
        ``(msgs, tools, found)``: under ``text`` the conversation with its control-token strings hidden
        (:meth:`ControlText.protect`; ``found`` says whether there was one); unchanged when there is none.

    Raises:
        RecordProblem: ``control_token_text`` (policy ``skip`` or ``fail``), naming the message and the token.
    """
    hit = control.scan(msgs, tools)
    if hit is None:
        return msgs, tools, False
    if policy != "text":
        where, token = hit
        raise RecordProblem("control_token_text", f"{where} holds the control-token string {token!r} as text "
                                                  "(policies.control_token_text=text encodes it as plain text)")
    protected, safe_tools = control.protect(msgs, tools)
    return protected, safe_tools, True


@dataclass
class Tokenized:
    """A tokenized sample: ``ids``, ``learned`` (1 = a token the model learns to produce, not yet
    label-aligned) and ``turn_ends`` (token counts at which a learned turn, with its ``\\n``, ends)."""

    ids: list[int]
    learned: list[int]
    turn_ends: list[int]


def tokenize_samples(tok, segmented: list[Segmented], control: ControlText | None = None) -> list[Tokenized]:
    """Encode the pieces of many samples in one batch (the template's control tokens recognised, no BOS/EOS
    added).

    A piece that holds message text hidden by :meth:`ControlText.protect` (``control`` given) is cut at the
    template's control tokens (:meth:`ControlText.split`, one id each); the text between them, its control-token
    strings restored, is encoded by the tokenizer's model alone (:func:`nemotron.data.tokenizer.text_only`: no
    added token can match), so those strings become the ids of their text. Every other piece is encoded as is.

    Raises:
        RuntimeFailure: the tokenizer's model itself turns a control-token string into its id (see
            :func:`nemotron.data.tokenizer.text_only`).
    """
    flat = [p for s in segmented for p in s.pieces]
    encs = [e.ids for e in tok.encode_batch_fast(flat, add_special_tokens=False)] if flat else []
    if control is not None:
        marked = [k for k, p in enumerate(flat) if MARK_OPEN in p]
        if marked:
            from nemotron.data.tokenizer import text_only

            plain = text_only(tok)
            for k in marked:
                ids: list[int] = []
                for j, part in enumerate(control.split(flat[k])):
                    if j % 2:
                        ids.append(tok.token_to_id(part))
                    elif part:
                        ids.extend(plain.encode(control.restore(part), add_special_tokens=False).ids)
                encs[k] = ids
    out: list[Tokenized] = []
    k = 0
    for s in segmented:
        ids = []
        mask: list[int] = []
        ends: list[int] = []
        after_learned = False
        for piece_learned in s.learned:
            piece_ids = encs[k]
            k += 1
            ids.extend(piece_ids)
            mask.extend([1 if piece_learned else 0] * len(piece_ids))
            if after_learned and not piece_learned:
                ends.append(len(ids))
            after_learned = piece_learned
        out.append(Tokenized(ids, mask, ends))
    return out


# --------------------------------------------------------------------------------------------------
# the tokenizer's chat tokens


def add_chat_tokens(json_path: str, tokens: list[str] | tuple[str, ...], out_dir: Path) -> tuple[Path | None, dict[str, int]]:
    """Give a ``tokenizer.json`` the chat tokens it lacks, as special tokens.

    Unused placeholder control tokens (``<SPECIAL_n>``, as Tekken vocabularies carry) are renamed
    first, lowest id first, so the vocabulary size does not change; only when none is left is a new
    id appended. The result is written to ``out_dir/tokenizer.json``.

    ``out_dir`` is a cache keyed by the source and the tokens (the caller names it so): where a complete
    result is already there (``tokenizer.json`` and its ``added.json`` record), it is returned as it is.

    Returns:
        ``(path, {token: id})`` of what was added; ``(None, {})`` when nothing was missing.
    """
    from nemotron.data.files import atomic_write_bytes

    out = out_dir / "tokenizer.json"
    record = out_dir / "added.json"  # written after the tokenizer (both atomically): present = complete
    if record.is_file() and out.is_file():
        try:
            done = json.loads(record.read_text(encoding="utf-8"))
            return (out, {str(k): int(v) for k, v in done["added"].items()}) if done["added"] else (None, {})
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass
    doc = json.loads(Path(json_path).read_text(encoding="utf-8"))
    vocab: dict[str, int] = doc["model"]["vocab"]
    added = doc.get("added_tokens") or []
    present = set(vocab) | {t["content"] for t in added}
    missing = [t for t in dict.fromkeys(tokens) if t not in present]
    if not missing:
        return None, {}
    placeholder = re.compile(r"<SPECIAL_\d+>")
    free = sorted((t for t in added if placeholder.fullmatch(t["content"])), key=lambda t: t["id"])
    next_id = max([*vocab.values(), *(t["id"] for t in added)]) + 1
    assigned: dict[str, int] = {}
    for token in missing:
        if free:
            entry = free.pop(0)
            if vocab.get(entry["content"]) == entry["id"]:
                del vocab[entry["content"]]
                vocab[token] = entry["id"]
            entry.update(content=token, special=True, normalized=False)
            assigned[token] = entry["id"]
        else:
            added.append({"id": next_id, "content": token, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True})
            assigned[token] = next_id
            next_id += 1
    doc["added_tokens"] = sorted(added, key=lambda t: t["id"])
    atomic_write_bytes(out, json.dumps(doc, ensure_ascii=False).encode())
    atomic_write_bytes(record, json.dumps({"source": str(json_path), "added": assigned}).encode())
    return out, assigned
