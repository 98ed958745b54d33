#!/usr/bin/env python3
"""plot.py LOAD.json OUT.svg — draw throughput (tokens/s) and p99 time per
output token against concurrent users from `ember bench --users ... --json`,
as a self-contained SVG (no plotting library needed)."""
import json
import sys


def main():
    data = json.load(open(sys.argv[1]))
    lv = data["levels"]
    users = [l["users"] for l in lv]
    tps = [l["tokens_per_s"] for l in lv]
    tpot = [l["tpot_p99_ms"] for l in lv]
    W, H, L, R, T, B = 640, 360, 70, 70, 40, 50
    pw, ph = W - L - R, H - T - B
    xs = list(range(len(users)))

    def x(i):
        return L + (pw * i / (len(users) - 1) if len(users) > 1 else pw / 2)

    def y(v, vmax):
        return T + ph - ph * v / vmax if vmax > 0 else T + ph

    tmax = max(tps) * 1.15 or 1
    pmax = max(tpot) * 1.15 or 1
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">' % (W, H),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="20" text-anchor="middle" font-size="14">%s</text>' % (W / 2, data.get("title", "ember: throughput and p99 TPOT against users")),
           '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (L, T + ph, L + pw, T + ph),
           '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#1f77b4"/>' % (L, T, L, T + ph),
           '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#d62728"/>' % (L + pw, T, L + pw, T + ph)]
    for k in range(5):
        v = tmax * k / 4
        out.append('<text x="%d" y="%.1f" text-anchor="end" fill="#1f77b4">%.0f</text>' % (L - 6, y(v, tmax) + 4, v))
        v2 = pmax * k / 4
        out.append('<text x="%d" y="%.1f" fill="#d62728">%.0f</text>' % (L + pw + 6, y(v2, pmax) + 4, v2))
    for i in xs:
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (x(i), T + ph + 18, users[i]))
    out.append('<text x="%d" y="%d" text-anchor="middle">concurrent users</text>' % (L + pw / 2, H - 10))
    out.append('<text x="16" y="%d" fill="#1f77b4" transform="rotate(-90 16 %d)" text-anchor="middle">tokens/s (all users)</text>' % (T + ph / 2, T + ph / 2))
    out.append('<text x="%d" y="%d" fill="#d62728" transform="rotate(90 %d %d)" text-anchor="middle">p99 time per output token (ms)</text>' % (W - 14, T + ph / 2, W - 14, T + ph / 2))
    for vals, vmax, color in ((tps, tmax, "#1f77b4"), (tpot, pmax, "#d62728")):
        pts = " ".join("%.1f,%.1f" % (x(i), y(vals[i], vmax)) for i in xs)
        out.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>' % (pts, color))
        for i in xs:
            out.append('<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>' % (x(i), y(vals[i], vmax), color))
    out.append('</svg>')
    open(sys.argv[2], "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
