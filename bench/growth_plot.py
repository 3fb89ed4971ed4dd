"""How each figure grows with the store, drawn as a log-log SVG: the store-size
benchmarks (`bench_scale`, `bench_pg_scale`) share it, so both plots read alike."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path


def plot(rows: Sequence[dict[str, float]], series: Sequence[tuple[str, str]], out: Path) -> None:
    """Each (key, title) in ``series`` over its value at the smallest store (``n``),
    log-log; a series missing or not positive at some size is left out."""
    rows = [r for r in rows if r["n"] > 0]
    if len(rows) < 2:
        return
    keys = [(k, t) for k, t in series if all(k in r and r[k] > 0 and math.isfinite(r[k]) for r in rows)]
    w, h, pad = 640, 400, 50
    xs = [math.log10(r["n"]) for r in rows]
    ratios = {k: [math.log10(r[k] / rows[0][k]) for r in rows] for k, _ in keys}
    lo = min(-0.1, *(v for vs in ratios.values() for v in vs))
    hi = max(1.0, *(v for vs in ratios.values() for v in vs))

    def sx(x: float) -> float:
        return pad + (x - xs[0]) / (xs[-1] - xs[0]) * (w - 2 * pad - 120)

    def sy(y: float) -> float:
        return h - pad - (y - lo) / (hi - lo) * (h - 2 * pad)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-size="10">',
             f'<line x1="{pad}" y1="{h - pad}" x2="{w - 120 - pad}" y2="{h - pad}" stroke="#000"/>',
             f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="#000"/>',
             f'<text x="{pad}" y="{pad - 10}">cost / cost at {int(rows[0]["n"]):,} (log) vs memories (log)</text>']  # fmt: skip
    for x, r in zip(xs, rows, strict=True):
        parts.append(f'<text x="{sx(x) - 12}" y="{h - pad + 14}">{int(r["n"]):,}</text>')
    line = sy(1.0)
    parts.append(f'<line x1="{pad}" y1="{sy(0)}" x2="{sx(xs[-1])}" y2="{line}" stroke="#ccc" stroke-dasharray="4"/>')
    for i, (key, title) in enumerate(keys):
        colour = f"hsl({i * 360 // len(keys)},70%,40%)"
        pts = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in zip(xs, ratios[key], strict=True))
        parts.append(f'<polyline points="{pts}" fill="none" stroke="{colour}"/>')
        parts.append(f'<text x="{w - 160}" y="{pad + 12 * i}" fill="{colour}">{title}</text>')
    parts.append("</svg>")
    out.write_text("\n".join(parts) + "\n")
