"""Plain SVG charts for the benchmark scripts (no matplotlib on the machine, none needed).

timeline_svg: delivered events per second (left axis) and end-to-end p50/p99 latency (right
axis) over the seconds of a run, from weir-sink's GET /timeline or any list of
{sec, count, p50_ms, p99_ms}. bars_svg: grouped bars, one group per metric, one bar per
system, each group scaled to its own maximum (the figures differ by orders of magnitude),
the value written above each bar. Pure functions of their input; they return the SVG text.
"""
import html
import os
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def _nice(v):
    """A round axis maximum >= v."""
    if v <= 0:
        return 1
    mag = 10 ** (len(str(int(v))) - 1) if v >= 1 else 1
    for m in (1, 2, 2.5, 5, 10):
        if v <= m * mag:
            return m * mag
    return 10 * mag


def _fmt(v):
    if v is None:
        return "-"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def timeline_svg(title, series, latency=None, w=760, h=320, right_label="e2e latency, ms"):
    """series: {label: [(sec, value), ...]} drawn on the left axis (events/s);
    latency: {label: [(sec, ms), ...]} on the right axis (dashed)."""
    pad_l, pad_r, pad_t, pad_b = 60, 60, 40, 45
    latency = latency or {}
    xs = [s for pts in list(series.values()) + list(latency.values()) for s, _ in pts]
    x_max = max(xs + [1])
    r_max = _nice(max([v for pts in series.values() for _, v in pts] + [1]))
    l_max = _nice(max([v or 0 for pts in latency.values() for _, v in pts] + [0.001]))
    pw, ph = w - pad_l - pad_r, h - pad_t - pad_b

    def x(s):
        return pad_l + pw * s / x_max

    def y(v, m):
        return pad_t + ph - ph * (v or 0) / m

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
           f'font-size="11">', '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{pad_l}" y="18" font-size="13">{html.escape(title)}</text>']
    for i in range(5):
        v = r_max * i / 4
        yy = y(v, r_max)
        out.append(f'<line x1="{pad_l}" y1="{yy:.1f}" x2="{w - pad_r}" y2="{yy:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{pad_l - 5}" y="{yy + 4:.1f}" text-anchor="end">{_fmt(v)}</text>')
        if latency:
            lv = l_max * i / 4
            out.append(f'<text x="{w - pad_r + 5}" y="{yy + 4:.1f}">{_fmt(lv)}</text>')
    for i in range(6):
        s = x_max * i / 5
        out.append(f'<text x="{x(s):.1f}" y="{h - pad_b + 15}" text-anchor="middle">{s:.0f}</text>')
    out.append(f'<text x="{pad_l + pw / 2}" y="{h - 8}" text-anchor="middle">seconds</text>')
    out.append(f'<text x="14" y="{pad_t + ph / 2}" transform="rotate(-90 14 {pad_t + ph / 2})" '
               f'text-anchor="middle">events/s</text>')
    if latency:
        out.append(f'<text x="{w - 10}" y="{pad_t + ph / 2}" transform="rotate(90 {w - 10} {pad_t + ph / 2})" '
                   f'text-anchor="middle">{html.escape(right_label)}</text>')
    out.append(f'<rect x="{pad_l}" y="{pad_t}" width="{pw}" height="{ph}" fill="none" stroke="black"/>')
    legend = []
    for i, (label, pts) in enumerate(series.items()):
        c = COLORS[i % len(COLORS)]
        p = " ".join(f"{x(s):.1f},{y(v, r_max):.1f}" for s, v in pts)
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="2" points="{p}"/>')
        legend.append((label, c, ""))
    for i, (label, pts) in enumerate(latency.items()):
        c = COLORS[(i + len(series)) % len(COLORS)]
        p = " ".join(f"{x(s):.1f},{y(v, l_max):.1f}" for s, v in pts if v is not None)
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.5" stroke-dasharray="5,3" points="{p}"/>')
        legend.append((label, c, "5,3"))
    for i, (label, c, dash) in enumerate(legend):
        lx = pad_l + 10 + (i % 3) * 220
        ly = pad_t + 14 + (i // 3) * 14
        out.append(f'<line x1="{lx}" y1="{ly - 4}" x2="{lx + 18}" y2="{ly - 4}" stroke="{c}" stroke-width="2" '
                   f'stroke-dasharray="{dash}"/><text x="{lx + 22}" y="{ly}">{html.escape(label)}</text>')
    out.append("</svg>\n")
    return "\n".join(out)


def sink_timeline_series(timeline, label="delivered/s"):
    """weir-sink /timeline -> (series, latency) for timeline_svg."""
    rate = {label: [(b["sec"], b["count"]) for b in timeline]}
    lat = {"e2e p50 ms": [(b["sec"], b.get("p50_ms")) for b in timeline],
           "e2e p99 ms": [(b["sec"], b.get("p99_ms")) for b in timeline]}
    return rate, lat


def bars_svg(title, groups, systems, w=None, h=340):
    """groups: [(metric label, {system: value or None}), ...]; one bar per system per group,
    each group scaled to its own largest value."""
    gw, bw = 110, 34
    w = w or max(500, 60 + gw * len(groups))
    pad_t, pad_b = 60, 70
    ph = h - pad_t - pad_b
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
           f'font-size="10">', '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="20" y="18" font-size="13">{html.escape(title)}</text>',
           '<text x="20" y="34" fill="#555">each group is scaled to its own maximum</text>']
    for i, s in enumerate(systems):
        c = COLORS[i % len(COLORS)]
        out.append(f'<rect x="{20 + i * 120}" y="42" width="12" height="10" fill="{c}"/>'
                   f'<text x="{36 + i * 120}" y="51">{html.escape(s)}</text>')
    base = pad_t + ph
    out.append(f'<line x1="20" y1="{base}" x2="{w - 20}" y2="{base}" stroke="black"/>')
    for g, (label, vals) in enumerate(groups):
        gx = 40 + g * gw
        m = max([v for v in vals.values() if v is not None] + [1e-9])
        for i, s in enumerate(systems):
            v = vals.get(s)
            c = COLORS[i % len(COLORS)]
            bh = 0 if v is None else ph * v / m
            bx = gx + i * bw
            out.append(f'<rect x="{bx}" y="{base - bh:.1f}" width="{bw - 4}" height="{bh:.1f}" fill="{c}"/>')
            out.append(f'<text x="{bx + (bw - 4) / 2}" y="{base - bh - 3:.1f}" text-anchor="middle">'
                       f'{_fmt(v)}</text>')
        words = label.split(" ")
        for k, line in enumerate([" ".join(words[:2]), " ".join(words[2:])]):
            out.append(f'<text x="{gx + bw * len(systems) / 2 - 2}" y="{base + 14 + 12 * k}" '
                       f'text-anchor="middle">{html.escape(line)}</text>')
    out.append("</svg>\n")
    return "\n".join(out)


def write(prefix, svg):
    """Writes bench/out/<prefix>-<time>.svg (or into $BENCH_OUT_DIR); returns its path, relative
    to the checkout when it is inside it."""
    out_dir = os.environ.get("BENCH_OUT_DIR") or os.path.join(ROOT, "bench", "out")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, time.strftime(f"{prefix}-%Y%m%d-%H%M%S.svg"))
    with open(path, "w") as f:
        f.write(svg)
    return os.path.relpath(path, ROOT) if path.startswith(ROOT + os.sep) else path
