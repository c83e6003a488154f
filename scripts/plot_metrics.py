#!/usr/bin/env python3
"""SVG line charts of a run's metrics.jsonl (one JSON object per step), without matplotlib.

    python3 scripts/plot_metrics.py runs/kk_ppo/metrics.jsonl --out score.svg \
        --keys critic/score/mean --title "training score" [--smooth 10] [--ylabel score]

Each key becomes one line over training/global_step (steps where the key is absent are skipped, so validation
metrics logged every test_freq steps plot as their own sparse line with point markers). --smooth N adds a
trailing moving average over N points drawn on top of the faint raw line. Exit status 2 when the file is missing
or none of the keys occurs in it.
"""
import argparse
import json
import math
import sys

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
WIDTH, HEIGHT = 640, 360
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 36, 48


def load_series(path, keys):
    series = {k: [] for k in keys}
    with open(path) as f:
        for line_number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"error: {path}:{line_number}: invalid JSON: {e}")
            step = record.get("training/global_step", line_number)
            for k in keys:
                v = record.get(k)
                if isinstance(v, (int, float)) and math.isfinite(v):
                    series[k].append((float(step), float(v)))
    return series


def moving_average(points, n):
    out, window = [], []
    for x, y in points:
        window.append(y)
        if len(window) > n:
            window.pop(0)
        out.append((x, sum(window) / len(window)))
    return out


def nice_ticks(lo, hi, count=5):
    """About `count` round tick values covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = min((m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw), default=10 * magnitude)
    first = math.floor(lo / step) * step
    ticks, t = [], first
    while t <= hi + 1e-9 * step:
        ticks.append(round(t, 10))
        t += step
    if ticks[-1] < hi:
        ticks.append(round(t, 10))
    return ticks


def fmt(v):
    return f"{v:g}" if abs(v) >= 1e-3 or v == 0 else f"{v:.1e}"


def polyline(points, sx, sy, color, width, opacity=1.0):
    coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in points)
    return (f'<polyline fill="none" stroke="{color}" stroke-width="{width}" stroke-opacity="{opacity}" '
            f'points="{coords}"/>')


def render(series, title, ylabel, smooth):
    present = {k: v for k, v in series.items() if v}
    xs = [x for pts in present.values() for x, _ in pts]
    ys = [y for pts in present.values() for _, y in pts]
    x_ticks, y_ticks = nice_ticks(min(xs), max(xs)), nice_ticks(min(ys), max(ys))
    x0, x1, y0, y1 = x_ticks[0], x_ticks[-1], y_ticks[0], y_ticks[-1]
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def sx(x):
        return LEFT + (x - x0) / ((x1 - x0) or 1) * pw

    def sy(y):
        return TOP + ph - (y - y0) / ((y1 - y0) or 1) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
           f'<text x="{WIDTH / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>']
    for t in y_ticks:
        out.append(f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{sy(t) + 4:.1f}" text-anchor="end">{fmt(t)}</text>')
    for t in x_ticks:
        out.append(f'<text x="{sx(t):.1f}" y="{TOP + ph + 16}" text-anchor="middle">{fmt(t)}</text>')
    out.append(f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>')
    out.append(f'<text x="{LEFT + pw / 2}" y="{HEIGHT - 10}" text-anchor="middle">step</text>')
    out.append(f'<text transform="translate(14,{TOP + ph / 2}) rotate(-90)" text-anchor="middle">{ylabel}</text>')
    for i, (key, pts) in enumerate(present.items()):
        color = COLORS[i % len(COLORS)]
        sparse = len(pts) <= 40
        if smooth > 1 and not sparse:
            out.append(polyline(pts, sx, sy, color, 1, opacity=0.3))
            out.append(polyline(moving_average(pts, smooth), sx, sy, color, 2))
        else:
            out.append(polyline(pts, sx, sy, color, 1.5))
        if sparse:
            out.extend(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{color}"/>' for x, y in pts)
        label = key + (f" ({smooth}-step mean)" if smooth > 1 and not sparse else "")
        ly = TOP + 14 + 14 * i
        out.append(f'<line x1="{LEFT + 8}" x2="{LEFT + 24}" y1="{ly - 4}" y2="{ly - 4}" stroke="{color}" '
                   f'stroke-width="2"/>')
        out.append(f'<text x="{LEFT + 28}" y="{ly}">{label}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics", help="metrics.jsonl of a run")
    parser.add_argument("--out", required=True, help="SVG file to write")
    parser.add_argument("--keys", nargs="+", required=True, help="metric names, one line each")
    parser.add_argument("--title", default="")
    parser.add_argument("--ylabel", default="")
    parser.add_argument("--smooth", type=int, default=1, help="moving-average window in points (1 = none)")
    args = parser.parse_args()
    try:
        series = load_series(args.metrics, args.keys)
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not any(series.values()):
        print(f"error: none of {', '.join(args.keys)} occurs in {args.metrics}", file=sys.stderr)
        return 2
    with open(args.out, "w") as f:
        f.write(render(series, args.title or ", ".join(args.keys), args.ylabel, args.smooth))
    return 0


if __name__ == "__main__":
    sys.exit(main())
