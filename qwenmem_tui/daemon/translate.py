"""The Responses API told in chat completions and back (`/v1/responses` on an endpoint
without it, `responses.py`): pure functions over JSON, and the stream's events.

A request's input items become chat messages (function calls join their assistant
message, outputs become tool messages); its function tools, tool choice, sampling
settings and text format become the chat request's. A chat completion's message
becomes output items (a message, then the function calls), its usage the Responses
usage; a streamed one is told as the events `client.responses.create(stream=True)`
reads, with sequence numbers.
"""

from __future__ import annotations

import json
import time
import uuid

from qwenmem_tui.llm.wire import JSONObject, Message, wire_json

_TEXT_PARTS = ("input_text", "output_text", "text")


class Unsupported(Exception):
    """What a translation onto chat completions cannot carry (a built-in tool, a file)."""


def input_items(body: JSONObject) -> list[JSONObject]:
    """The request's input as items (a string is one user message)."""
    given = body["input"]
    return [{"role": "user", "content": given}] if isinstance(given, str) else list(given)


def chat_messages(items: list[Message], *, strict: bool) -> list[Message]:
    """Input items as chat-completions messages. `strict`: an item chat completions
    cannot carry raises Unsupported; else it is left out (the forwarded request keeps
    it: this view only finds the latest user message for recall)."""
    messages: list[Message] = []
    for item in items:
        kind = item.get("type", "message")
        try:
            if kind == "message":
                messages.append(_message(item))
            elif kind == "function_call":
                _add_call(messages, item)
            elif kind == "function_call_output":
                output = item.get("output")
                text = output if isinstance(output, str) else _parts_text(output)
                messages.append({"role": "tool", "tool_call_id": str(item.get("call_id")), "content": text})
            elif kind != "reasoning":  # the model's own notes: chat completions has no place
                raise Unsupported(f"input items of type {kind!r}")
        except Unsupported:
            if strict:
                raise
    return messages


def _message(item: Message) -> Message:
    role = item.get("role")
    if role not in ("user", "assistant", "system", "developer"):
        raise Unsupported(f"messages with role {role!r}")
    content = item.get("content")
    if not isinstance(content, str):
        if not isinstance(content, list):
            raise Unsupported("a message without content")
        if any(isinstance(p, dict) and p.get("type") == "input_image" for p in content):
            content = [_image_or_text(part) for part in content]
        else:
            content = _parts_text(content)
    return {"role": "system" if role == "developer" else role, "content": content}


def _parts_text(parts: object) -> str:
    if not isinstance(parts, list):
        raise Unsupported("content that is neither text nor a list of parts")
    texts = []
    for part in parts:
        if not isinstance(part, dict) or part.get("type") not in _TEXT_PARTS:
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise Unsupported(f"content parts of type {kind!r}")
        texts.append(str(part.get("text") or ""))
    return "\n".join(texts)


def _image_or_text(part: object) -> JSONObject:
    if isinstance(part, dict) and part.get("type") == "input_image" and part.get("image_url"):
        return {"type": "image_url", "image_url": {"url": part["image_url"]}}
    return {"type": "text", "text": _parts_text([part])}


def _add_call(messages: list[Message], item: Message) -> None:
    """A function call joins the assistant message before it (parallel calls are one
    chat message), or starts one."""
    call = {
        "id": str(item.get("call_id")),
        "type": "function",
        "function": {"name": str(item.get("name")), "arguments": str(item.get("arguments") or "")},
    }
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant" and "tool_calls" in last:
        last["tool_calls"].append(call)
    elif last is not None and last["role"] == "assistant":
        last["tool_calls"] = [call]
    else:
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def chat_request(body: Message, messages: list[Message], model: str) -> Message:
    """The chat-completions request for a Responses request (messages shaped already)."""
    chat: Message = {"model": body.get("model") or model, "messages": messages}
    tools = body.get("tools") or []
    if tools:
        chat["tools"] = [_tool(tool) for tool in tools]
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "function":
        chat["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
    elif choice is not None:
        chat["tool_choice"] = choice
    for name, chat_name in (
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("max_output_tokens", "max_tokens"),
        ("parallel_tool_calls", "parallel_tool_calls"),
        ("user", "user"),
    ):
        if body.get(name) is not None:
            chat[chat_name] = body[name]
    if (fmt := _response_format(body.get("text"))) is not None:
        chat["response_format"] = fmt
    if body.get("stream") is True:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat


def _tool(tool: object) -> JSONObject:
    if not isinstance(tool, dict) or tool.get("type") != "function":
        kind = tool.get("type") if isinstance(tool, dict) else tool
        raise Unsupported(f"tools of type {kind!r} (only function tools)")
    function = {"name": tool.get("name"), "parameters": tool.get("parameters") or {"type": "object"}}
    if tool.get("description"):
        function["description"] = tool["description"]
    if tool.get("strict") is not None:
        function["strict"] = tool["strict"]
    return {"type": "function", "function": function}


def _response_format(text: object) -> JSONObject | None:
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(fmt, dict) or fmt.get("type") in (None, "text"):
        return None
    if fmt["type"] == "json_schema":
        schema = {key: fmt[key] for key in ("name", "schema", "strict", "description") if key in fmt}
        return {"type": "json_schema", "json_schema": schema}
    return {"type": fmt["type"]}


# -- the answer ------------------------------------------------------------------------


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def response_object(
    body: JSONObject,
    response_id: str,
    *,
    model: str,
    output: list[JSONObject],
    usage: JSONObject | None,
    status: str = "completed",
    incomplete: str | None = None,
) -> JSONObject:
    """A Responses API `response` object, with the request's settings echoed."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": model,
        "output": output,
        "usage": _usage(usage),
        "error": None,
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "instructions": body.get("instructions"),
        "previous_response_id": body.get("previous_response_id"),
        "tools": body.get("tools") or [],
        "tool_choice": body.get("tool_choice") or "auto",
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "max_output_tokens": body.get("max_output_tokens"),
        "text": body.get("text") or {"format": {"type": "text"}},
        "truncation": "disabled",
        "metadata": body.get("metadata") or {},
        "store": True,
    }


def _usage(usage: JSONObject | None) -> JSONObject | None:
    if not isinstance(usage, dict):
        return None
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": int(usage.get("total_tokens") or prompt + completion),
    }


def message_item(text: str, item_id: str, status: str = "completed") -> Message:
    part = {"type": "output_text", "text": text, "annotations": []}
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": [part] if status == "completed" else [],
    }


def call_item(call_id: str, name: str, arguments: str, item_id: str, status: str = "completed") -> JSONObject:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def output_of(message: Message) -> list[Message]:
    """A chat completion's assistant message as Responses output items."""
    output = []
    content = message.get("content")
    if isinstance(content, str) and content:
        output.append(message_item(content, new_id("msg")))
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        output.append(
            call_item(
                str(call.get("id")), str(function.get("name")), str(function.get("arguments") or ""), new_id("fc")
            )
        )
    return output


def assistant_message(output: list[Message]) -> Message:
    """Output items as the chat message a later request's history holds."""
    text = "".join(
        part["text"] for item in output if item["type"] == "message" for part in item["content"]
    )
    message: Message = {"role": "assistant", "content": text or None}
    calls = [
        {"id": item["call_id"], "type": "function", "function": {"name": item["name"], "arguments": item["arguments"]}}
        for item in output
        if item["type"] == "function_call"
    ]
    if calls:
        message["tool_calls"] = calls
    return message


def incomplete_reason(finish_reason: object) -> str | None:
    return "max_output_tokens" if finish_reason == "length" else None


class StreamTranslation:
    """A chat-completions SSE stream read chunk by chunk, told as Responses events:
    the text as one message item, each tool call as a function-call item, in the
    order they began; `finish` closes them and completes the response."""

    def __init__(self, body: JSONObject, response_id: str, model: str) -> None:
        self._body = body
        self._id = response_id
        self._model = model
        self._sequence = 0
        self._output: list[JSONObject] = []  # items in output order
        self._text: Message | None = None  # the message item, once text came
        self._texts: list[str] = []
        self._calls: dict[int, JSONObject] = {}  # by the chunk's tool-call index
        self.usage: JSONObject | None = None
        self.finish_reason: str | None = None

    def event(self, kind: str, **fields: object) -> bytes:
        payload = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return f"event: {kind}\ndata: {wire_json(payload)}\n\n".encode()

    def _response(
        self, status: str, output: list[JSONObject], usage: JSONObject | None = None
    ) -> JSONObject:
        incomplete = incomplete_reason(self.finish_reason) if status != "in_progress" else None
        if incomplete:
            status = "incomplete"
        return response_object(
            self._body, self._id, model=self._model, output=output, usage=usage,
            status=status, incomplete=incomplete,
        )

    def start(self) -> list[bytes]:
        response = self._response("in_progress", [])
        return [self.event("response.created", response=response), self.event("response.in_progress", response=response)]

    def chunk(self, data: JSONObject) -> list[bytes]:
        """The events one chat chunk makes."""
        if isinstance(data.get("usage"), dict):
            self.usage = data["usage"]
        events: list[bytes] = []
        for choice in data.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str) and delta["content"]:
                events.extend(self._text_delta(delta["content"]))
            for call in delta.get("tool_calls") or []:
                if isinstance(call, dict):
                    events.extend(self._call_delta(call))
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        return events

    def _text_delta(self, text: str) -> list[bytes]:
        events = []
        if self._text is None:
            self._text = message_item("", new_id("msg"), status="in_progress")
            index = len(self._output)
            self._output.append(self._text)
            events.append(self.event("response.output_item.added", output_index=index, item=self._text))
            part = {"type": "output_text", "text": "", "annotations": []}
            events.append(
                self.event(
                    "response.content_part.added",
                    item_id=self._text["id"], output_index=index, content_index=0, part=part,
                )
            )
        self._texts.append(text)
        index = self._output.index(self._text)
        events.append(
            self.event(
                "response.output_text.delta",
                item_id=self._text["id"], output_index=index, content_index=0, delta=text, logprobs=[],
            )
        )
        return events

    def _call_delta(self, call: JSONObject) -> list[bytes]:
        events = []
        function = call.get("function") or {}
        key = int(call.get("index") or 0)
        item = self._calls.get(key)
        if item is None:
            item = call_item(str(call.get("id") or new_id("call")), "", "", new_id("fc"), status="in_progress")
            item["name"] = str(function.get("name") or "")
            self._calls[key] = item
            self._output.append(item)
            events.append(self.event("response.output_item.added", output_index=len(self._output) - 1, item=dict(item)))
        elif function.get("name"):
            item["name"] += str(function["name"])
        if arguments := function.get("arguments"):
            item["arguments"] += str(arguments)
            events.append(
                self.event(
                    "response.function_call_arguments.delta",
                    item_id=item["id"], output_index=self._output.index(item), delta=str(arguments),
                )
            )
        return events

    def finish(self) -> tuple[list[bytes], list[JSONObject]]:
        """The closing events, and the finished output items."""
        events = []
        output = []
        for index, item in enumerate(self._output):
            if item is self._text:
                text = "".join(self._texts)
                done = message_item(text, item["id"])
                part = done["content"][0]
                ids = {"item_id": item["id"], "output_index": index, "content_index": 0}
                events.append(self.event("response.output_text.done", **ids, text=text, logprobs=[]))
                events.append(self.event("response.content_part.done", **ids, part=part))
            else:
                done = call_item(item["call_id"], item["name"], item["arguments"], item["id"])
                events.append(
                    self.event(
                        "response.function_call_arguments.done",
                        item_id=item["id"], output_index=index, arguments=item["arguments"],
                    )
                )
            events.append(self.event("response.output_item.done", output_index=index, item=done))
            output.append(done)
        response = self._response("completed", output, self.usage)
        events.append(self.event("response.completed", response=response))
        return events, output

    def failed(self, message: str) -> bytes:
        response = self._response("failed", [])
        response["error"] = {"code": "server_error", "message": message}
        return self.event("response.failed", response=response)
