"""A `session/prompt`'s content blocks as the text of one user message.

The chat is text: text blocks are the user's words. Anything else the client attaches
(a file, a link, an image) is content the user did not type, so it is not pasted into
the message as if they had (the memory guard takes the user's message as the user's
word): an attachment is named by its URI, and the model reads a file of the project
with read_file, whose output counts as untrusted like any file it reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from acp.helpers import ContentBlock
from acp.schema import (
    AudioContentBlock,
    EmbeddedResourceContentBlock,
    ImageContentBlock,
    ResourceContentBlock,
    TextContentBlock,
)

ATTACHED = "[attached: {uri}]"
NOT_SENT = "[{kind} not sent: qwenmem sends the model text only]"


def block_text(block: ContentBlock) -> str:
    """One content block as text (see the module doc)."""
    if isinstance(block, TextContentBlock):
        return block.text
    if isinstance(block, ResourceContentBlock):
        return ATTACHED.format(uri=block.uri)
    if isinstance(block, EmbeddedResourceContentBlock):
        return ATTACHED.format(uri=block.resource.uri)
    if isinstance(block, ImageContentBlock):
        return NOT_SENT.format(kind="image")
    if isinstance(block, AudioContentBlock):
        return NOT_SENT.format(kind="audio")
    return ""


def prompt_text(blocks: Sequence[ContentBlock]) -> str:
    """The blocks' text, attachments on lines of their own."""
    parts: list[str] = []
    for block in blocks:
        text = block_text(block)
        if not text:
            continue
        if parts and not isinstance(block, TextContentBlock):
            text = "\n" + text
        parts.append(text)
    return "".join(parts)
