"""`qwenmem acp` fuzzed over its stdio: requests drawn from the protocol's own schema
(the SDK's request models, as JSON Schema), requests around its methods and shapes
with any JSON in them, and damaged lines (truncated JSON, invalid UTF-8, lone
surrogates, huge ids, JSON that is not an object, unknown methods). Every request
gets its answer, every broken line its JSON-RPC error, nothing is stored for a
rejected request, and the agent neither exits nor hangs: after the run it still
holds a conversation and exits cleanly at the end of its input."""

from __future__ import annotations

import itertools
import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from acp.meta import AGENT_METHODS
from acp.schema import (
    AuthenticateRequest,
    CancelNotification,
    InitializeRequest,
    ListSessionsRequest,
    LoadSessionRequest,
    NewSessionRequest,
    PromptRequest,
)
from cli_support import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply
from tests.fuzz_support import fuzz_examples
from tests.process_support import checkout_env

ANSWER_TIMEOUT_S = 30.0
EXAMPLES, _ = fuzz_examples(150)
"""Bounds a wait for an answer so a hang fails the test instead of stalling it."""

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
methods = st.sampled_from(sorted(AGENT_METHODS.values())) | st.text(max_size=24)
ids = st.integers() | st.text(max_size=12) | st.integers(min_value=10**20, max_value=10**60)
blocks = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "image", "resource_link", "resource", "bogus"])},
    optional={"text": st.text(max_size=30), "uri": st.text(max_size=20), "data": st.text(max_size=8)},
)
shaped_params = st.fixed_dictionaries(
    {},
    optional={
        "sessionId": st.text(max_size=30),
        "cwd": st.sampled_from(["", "relative/dir", "/no/such/dir", "\x00", "/dev/null"]) | st.text(max_size=20),
        "prompt": st.lists(blocks, max_size=3) | json_values,
        "protocolVersion": st.integers() | st.text(max_size=5),
        "mcpServers": st.lists(json_values, max_size=2),
        "_meta": json_values,
    },
)
params = shaped_params | json_values


def from_schema(schema: dict[str, Any], defs: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
    """Values a JSON Schema (as pydantic writes the SDK's models) admits: $ref,
    anyOf/oneOf, const, enum, objects with their required and optional properties,
    arrays, scalars; an open object (`_meta`) gets any JSON."""
    if "$ref" in schema:
        return from_schema(defs[schema["$ref"].rsplit("/", 1)[-1]], defs, depth + 1)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return st.one_of([from_schema(option, defs, depth + 1) for option in schema[key]])
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind == "object":
        properties = {k: from_schema(v, defs, depth + 1) for k, v in schema.get("properties", {}).items()}
        if not properties:
            return st.dictionaries(st.text(max_size=8), json_values, max_size=3)
        required = set(schema.get("required", ()))
        return st.fixed_dictionaries(
            {k: v for k, v in properties.items() if k in required},
            optional={k: v for k, v in properties.items() if k not in required and depth < 6},
        )
    if kind == "array":
        return st.lists(from_schema(schema.get("items", {}), defs, depth + 1), max_size=3)
    return {
        "string": st.text(max_size=24),
        "integer": st.integers(schema.get("minimum"), schema.get("maximum")),
        "number": st.floats(allow_nan=False, allow_infinity=False),
        "boolean": st.booleans(),
        "null": st.none(),
    }.get(kind, json_values)


def schema_params(model: Any) -> st.SearchStrategy[Any]:
    schema = model.model_json_schema(by_alias=True)
    return from_schema(schema, schema.get("$defs", {}))


SCHEMA_REQUESTS = {
    "initialize": InitializeRequest,
    "authenticate": AuthenticateRequest,
    "session/new": NewSessionRequest,
    "session/load": LoadSessionRequest,
    "session/list": ListSessionsRequest,
    "session/prompt": PromptRequest,
}


def _line(message: Any) -> bytes:
    return json.dumps(message).encode()


requests = st.builds(
    lambda method, p, request_id: ("request", request_id, _line({"jsonrpc": "2.0", "id": request_id, "method": method, "params": p})),
    methods,
    params,
    ids,
)
from_the_schema = st.sampled_from([*sorted(SCHEMA_REQUESTS), "session/prompt"]).flatmap(
    lambda method: st.builds(
        lambda p, request_id: (
            "request", request_id, _line({"jsonrpc": "2.0", "id": request_id, "method": method, "params": p})
        ),
        schema_params(SCHEMA_REQUESTS[method]),
        st.integers(min_value=0, max_value=2**53),
    )
)
# A well-formed prompt of any text (not a slash command, which stores no turn): aimed at
# the session, it reaches the model — the schema's own prompts rarely do, their blocks
# being random, so without these a run could pass no prompt at all to the model.
text_prompts = st.builds(
    lambda text, request_id: (
        "request",
        request_id,
        _line({"jsonrpc": "2.0", "id": request_id, "method": "session/prompt",
               "params": {"sessionId": "", "prompt": [{"type": "text", "text": text}]}}),
    ),
    st.text(min_size=1, max_size=40).filter(lambda t: t.strip() and not t.lstrip().startswith("/")),
    st.integers(min_value=0, max_value=2**53),
)
cancels = st.builds(
    lambda p: ("notification", None, _line({"jsonrpc": "2.0", "method": "session/cancel", "params": p})),
    schema_params(CancelNotification),
)
notifications = st.builds(
    lambda method, p: ("notification", None, _line({"jsonrpc": "2.0", "method": method, "params": p})),
    methods,
    params,
)
truncated = st.builds(
    lambda method, request_id, cut: ("broken", None, _line({"jsonrpc": "2.0", "id": request_id, "method": method})[:cut]),
    methods,
    st.integers(),
    st.integers(min_value=1, max_value=20),
)
raw_bytes = st.binary(min_size=1, max_size=40).map(lambda b: b.replace(b"\n", b" ")).filter(
    lambda b: b.strip() and b'"method"' not in b
)
garbage = st.builds(lambda data: ("broken", None, data), raw_bytes)
surrogates = st.builds(
    lambda request_id: (
        "request",
        request_id,
        b'{"jsonrpc":"2.0","id":%d,"method":"session/prompt","params":{"sessionId":"\\ud800","prompt":[{"type":"text","text":"\\udfff"}]}}'
        % request_id,
    ),
    st.integers(min_value=0, max_value=10**9),
)
not_objects = st.builds(
    lambda value: ("broken", None, _line(value)),
    st.lists(json_values, max_size=3) | scalars,
)
deep = st.integers(min_value=5_000, max_value=50_000).map(lambda n: ("broken", None, b"[" * n + b"]" * n))
damaged = requests | notifications | truncated | garbage | surrogates | not_objects | deep
messages = from_the_schema | text_prompts | cancels | damaged


class AgentProcess:
    """`qwenmem acp` with a thread reading its answers (each line must be JSON)."""

    def __init__(self, cwd: Path, stderr: Any) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "qwenmem_tui", "acp"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            cwd=cwd,
            env=checkout_env(os.environ),
        )
        self.answers: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._pings = itertools.count()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.answers.put(json.loads(line))  # not JSON: the test fails at its get
        self.answers.put(None)

    def send(self, line: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()

    def collect(self, wanted: set[Any], nulls: int) -> list[dict[str, Any]]:
        """Answers until every id in `wanted` and `nulls` null-id errors arrived."""
        got: list[dict[str, Any]] = []
        while wanted or nulls:
            answer = self.answers.get(timeout=ANSWER_TIMEOUT_S)
            assert answer is not None, f"the agent exited ({self.process.wait()})"
            if "method" in answer:
                continue  # the agent's own notification (a session's commands)
            assert answer.get("jsonrpc") == "2.0" and ("result" in answer) != ("error" in answer), answer
            if "error" in answer:
                assert isinstance(answer["error"]["code"], int) and isinstance(answer["error"]["message"], str)
                assert "Traceback" not in json.dumps(answer)
            if answer["id"] is None:
                nulls -= 1
            else:
                assert answer["id"] in wanted, answer
                wanted.discard(answer["id"])
            got.append(answer)
        return got

    def ping(self) -> None:
        """An unknown extension method must be answered: the agent still reads."""
        ping = f"ping-{next(self._pings)}"
        self.send(_line({"jsonrpc": "2.0", "id": ping, "method": "_qwenmem/ping"}))
        (answer,) = self.collect({ping}, 0)
        assert answer["error"]["code"] == -32601


def test_every_message_is_answered_and_the_agent_lives_on(
    fake: FakeOpenAI, home: Path, project: Path, tmp_path: Path, cli_run: CliRunner
) -> None:
    with (home / "config.toml").open("a", encoding="utf-8") as config:
        config.write('\n[memory]\nembedding = "hash"\nextraction = false\n')
    fake.responder = lambda body: Reply("ok")
    stderr_path = tmp_path / "stderr.txt"
    with stderr_path.open("wb") as stderr:
        agent = AgentProcess(project, stderr)
        try:
            session_id = _new_session(agent, project)
            _chat(agent, fake, session_id)
            answered = _fuzz(agent, session_id, project)
            assert answered > 0  # generated prompts reached the model too
            _chat(agent, fake, session_id)  # still chatting after it all
        finally:
            if agent.process.stdin is not None:
                agent.process.stdin.close()
            code = agent.process.wait(timeout=ANSWER_TIMEOUT_S)
    assert code == 0
    assert "Traceback" not in stderr_path.read_text(errors="replace")
    # One session stored, holding exactly the prompts that were answered: nothing was
    # written for a rejected request.
    listed = json.loads(cli_run("sessions", "--json", home=home, cwd=project).stdout)
    assert [s["id"] for s in listed] == [session_id]
    assert listed[0]["message_count"] == 2 * (answered + 2)


def _fuzz(agent: AgentProcess, session_id: str, project: Path) -> int:
    """Run the generated messages; how many prompts to the real session were answered
    (some generated requests are pointed at it and at the project, to reach past the
    "no such session" and "no such directory" answers)."""
    answered = 0

    @settings(max_examples=EXAMPLES, suppress_health_check=list(HealthCheck), database=None)
    @given(messages, st.booleans())
    def one(message: tuple[str, Any, bytes], aimed: bool) -> None:
        nonlocal answered
        kind, request_id, line = message
        prompt = False
        if aimed and kind == "request" and line.startswith(b'{"jsonrpc"'):
            request = json.loads(line)
            params = request.get("params")
            if isinstance(params, dict):
                params.update({k: v for k, v in (("sessionId", session_id), ("cwd", str(project))) if k in params})
                prompt = request.get("method") == "session/prompt" and "sessionId" in params
                line = _line(request)
        agent.send(line)
        if kind == "request":
            (answer,) = agent.collect({request_id}, 0)
            answered += prompt and "result" in answer
        elif kind == "broken":
            (answer,) = agent.collect(set(), 1)
            assert answer["error"]["code"] in (-32700, -32600)
        agent.ping()

    one()
    return answered


def _new_session(agent: AgentProcess, project: Path) -> str:
    agent.send(_line({"jsonrpc": "2.0", "id": "new", "method": "session/new", "params": {"cwd": str(project), "mcpServers": []}}))
    (created,) = agent.collect({"new"}, 0)
    return created["result"]["sessionId"]


def _chat(agent: AgentProcess, fake: FakeOpenAI, session_id: str) -> None:
    """A plain prompt to the session: streamed back, answered end_turn."""
    fake.script(Reply("Still here."))
    prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": "Are you there?"}]}
    agent.send(_line({"jsonrpc": "2.0", "id": "prompt", "method": "session/prompt", "params": prompt}))
    answers: list[dict[str, Any]] = []
    while not any(a.get("id") == "prompt" for a in answers):
        answer = agent.answers.get(timeout=ANSWER_TIMEOUT_S)
        assert answer is not None
        answers.append(answer)
    assert answers[-1]["result"]["stopReason"] == "end_turn"
    chunks = [a["params"]["update"] for a in answers if a.get("method") == "session/update"]
    text = "".join(u["content"]["text"] for u in chunks if u["sessionUpdate"] == "agent_message_chunk")
    assert text == "Still here."
