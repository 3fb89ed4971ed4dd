"""The demo model for trying qwenmem without an endpoint: `python -m qwenmem_tui.testing.demo`.

The fake server echoes; this module injects the answers the app's side requests need
(a tagged recap for /recap, a JSON summary for /compact), keyed by the product's own
prompts, so those features work in the demo too.
"""

from __future__ import annotations

from collections.abc import Sequence

from qwenmem_tui.features.compaction.summariser import SUMMARY_SYSTEM_PROMPT
from qwenmem_tui.features.recap.session_recap import RECAP_SYSTEM_PROMPT
from qwenmem_tui.testing import fake_openai
from qwenmem_tui.testing.fake_openai import (
    Responder,
    by_system_prompt,
    recap_answer,
    summary_answer,
)


def demo_responder() -> Responder:
    """Echo, plus recap and compaction answers for the app's own prompts."""
    return by_system_prompt(
        {RECAP_SYSTEM_PROMPT: recap_answer, SUMMARY_SYSTEM_PROMPT: summary_answer}
    )


def main(argv: Sequence[str] | None = None) -> None:
    """The fake server's command line, answering as the demo model."""
    fake_openai.main(argv, responder=demo_responder(), prog="python -m qwenmem_tui.testing.demo")


if __name__ == "__main__":
    main()
