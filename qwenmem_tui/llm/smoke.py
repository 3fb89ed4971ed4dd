"""One completion by the bundled local model, run once after install.

`make run` / `make test` call this so that a llama.cpp built for another CPU (an
illegal instruction on the first completion) is found at install time with a fix to
run, not as a reply "cut off mid-stream" in the chat. Exit 0: the model answered;
exit 1: it did not, and stderr says why and what to do. A machine without the
`local` extra or the bundled model is not an error here (nothing to prove).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import httpx

from qwenmem_tui.llm.local_server import (
    LOCAL_API_KEY,
    LocalModelError,
    LocalModelServer,
    find_bundled_model,
)

REBUILD_HINT = (
    "Rebuild llama.cpp for this CPU: rm -rf ~/.cache/qwenmem/wheels .make-stamp-llama "
    "&& make run (or set llm.base_url to use an endpoint instead; docs/local-model.md)"
)


def main() -> int:
    """Start the bundled model, ask for a few tokens, report in one line."""
    try:
        import llama_cpp  # noqa: F401  (only its presence is checked here)

        model = find_bundled_model()
    except (ImportError, LocalModelError) as exc:
        print(f"local model smoke test skipped: {exc}", file=sys.stderr)
        return 0
    with tempfile.TemporaryDirectory(prefix="qwenmem-smoke-") as tmp:
        server = LocalModelServer(model, log_dir=Path(tmp), label="smoke", startup_timeout=120)
        try:
            server.start()
            answer = _complete(server)
        except (LocalModelError, httpx.HTTPError, ValueError, KeyError) as exc:
            reason = server.exit_reason() or str(exc)
            log_tail = _tail(server.log_path)
            server.stop()
            print(f"✗ The bundled local model does not run on this machine: {reason}", file=sys.stderr)
            if log_tail:
                print(f"  last output: {log_tail}", file=sys.stderr)
            print(f"  {REBUILD_HINT}", file=sys.stderr)
            return 1
        server.stop()
    print(f"✓ local model runs on this CPU (answered {answer!r})")
    return 0


def _complete(server: LocalModelServer) -> str:
    response = httpx.post(
        f"{server.base_url}/chat/completions",
        headers={"Authorization": f"Bearer {LOCAL_API_KEY}"},
        json={
            "model": server.model,
            "messages": [{"role": "user", "content": "Say OK."}],
            "max_tokens": 4,
            "temperature": 0,
        },
        timeout=120,
    )
    response.raise_for_status()
    return str(response.json()["choices"][0]["message"]["content"]).strip()


def _tail(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:200] if lines else ""


if __name__ == "__main__":
    sys.exit(main())
