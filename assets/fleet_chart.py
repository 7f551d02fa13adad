"""The fleet report's pictures: the SVG chart (a histogram of every checkpoint's longest replay
chain, then the most urgent checkpoints' chains and reclaimable bytes) and the table of what needs
attention, drawn with no plotting library to install."""

from xml.sax.saxutils import escape

from assets import markdown
from checkpoint.analysis import FleetRow, human_bytes, needs_attention, ranked
from checkpoint.policy import POLICY, Policy


def attention_markdown(rows: list[FleetRow], policy: Policy = POLICY, limit: int = 10) -> str:
    items = needs_attention(rows, policy, limit)
    if not items:
        return f"All {len(rows)} checkpoints are healthy: nothing needs attention."
    cells = [(i, f"`{a.row.key}`", a.reason, a.action) for i, a in enumerate(items, 1)]
    return markdown.table(("#", "checkpoint", "why", "what fixes it"), cells)


_HISTOGRAM_HEIGHT, _BINS = 110, 30


def _chain_histogram(rows: list[FleetRow], policy: Policy, width: int) -> list[str]:
    """SVG parts of a histogram over every checkpoint, however many: how many replay a chain of
    each length, the bins at or past the policy's threshold in red."""
    longest = max([policy.long_chain, *(r.max_chain_length for r in rows)])
    step = -(-(longest + 1) // _BINS)
    counts = [0] * (-(-(longest + 1) // step))
    for r in rows:
        counts[r.max_chain_length // step] += 1
    tallest = max(counts, default=0) or 1
    left, span = 40, width - 60
    w = span / len(counts)
    parts = [f'<text x="10" y="14">{len(rows)} checkpoints by their longest replay chain '
             f"(bins of {step}; red: at or past {policy.long_chain})</text>"]  # fmt: skip
    base = _HISTOGRAM_HEIGHT + 4
    for i, n in enumerate(counts):
        h = (_HISTOGRAM_HEIGHT - 30) * n / tallest
        colour = "#e74c3c" if (i + 1) * step > policy.long_chain else "#95a5a6"
        x = left + i * w
        tip = f"chain {i * step}-{(i + 1) * step - 1}: {n}"
        parts.append(f'<rect x="{x:.1f}" y="{base - h:.1f}" width="{max(w - 1, 1):.1f}" height="{h:.1f}" '
                     f'fill="{colour}"><title>{tip}</title></rect>')  # fmt: skip
        if n:
            parts.append(f'<text x="{x + w / 2:.1f}" y="{base - h - 2:.1f}" text-anchor="middle" '
                         f'font-size="9">{n}</text>')  # fmt: skip
    parts.append(f'<text x="{left}" y="{base + 12}" font-size="9">0</text>')
    parts.append(f'<text x="{left + span}" y="{base + 12}" font-size="9" text-anchor="end">{longest}</text>')
    return parts


def chart_svg(rows: list[FleetRow], policy: Policy = POLICY, width: int = 900) -> str:
    """Two horizontal bars per checkpoint (longest chain, reclaimable bytes), most urgent first: an
    SVG a browser shows as is, with no plotting library to install."""
    histogram = _chain_histogram(rows, policy, width)
    every = len(rows)
    rows = ranked(rows, policy)[:40]
    bar, gap, label = 9, 8, 260
    head = _HISTOGRAM_HEIGHT + 24
    height = head + 40 + len(rows) * (2 * bar + gap)
    chain_max = max([policy.long_chain, *(r.max_chain_length for r in rows)])
    bytes_max = max([1, *((r.reclaimable_bytes or 0) for r in rows)])
    span = width - label - 120
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
        'font-size="11">',
        '<rect width="100%" height="100%" fill="white"/>',
        *histogram,
        f'<text x="10" y="{head + 14}">the {len(rows)} most urgent of {every}, by need</text>',
        f'<text x="{label}" y="{head + 28}" fill="#c0392b">chain length (changelogs replayed)</text>',
        f'<text x="{label + 260}" y="{head + 28}" fill="#2e86c1">reclaimable bytes</text>',
    ]
    threshold = label + span * policy.long_chain / chain_max
    parts.append(f'<line x1="{threshold:.1f}" y1="{head + 34}" x2="{threshold:.1f}" y2="{height}" '
                 'stroke="#c0392b" stroke-dasharray="3,3"/>')  # fmt: skip
    for i, row in enumerate(rows):
        y = head + 42 + i * (2 * bar + gap)
        name = row.key if len(row.key) <= 38 else "…" + row.key[-37:]
        colour = "#c0392b" if row.errors else "#333"
        parts.append(
            f'<text x="{label - 6}" y="{y + bar + 3}" text-anchor="end" fill="{colour}">{escape(name)}</text>'
        )
        chain_w = span * row.max_chain_length / chain_max
        bytes_w = span * (row.reclaimable_bytes or 0) / bytes_max
        parts.append(f'<rect x="{label}" y="{y}" width="{chain_w:.1f}" height="{bar}" fill="#e74c3c"/>')
        parts.append(f'<text x="{label + chain_w + 4:.1f}" y="{y + bar - 1}">{row.max_chain_length}</text>')
        parts.append(f'<rect x="{label}" y="{y + bar}" width="{bytes_w:.1f}" height="{bar}" fill="#5dade2"/>')
        shown = "unknown" if row.reclaimable_bytes is None else human_bytes(row.reclaimable_bytes)
        parts.append(f'<text x="{label + bytes_w + 4:.1f}" y="{y + 2 * bar - 1}">{shown}</text>')
    parts.append("</svg>")
    return "\n".join(parts)
