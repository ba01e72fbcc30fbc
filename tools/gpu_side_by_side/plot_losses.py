"""Two training loss curves in one SVG: gpt2vk train's --log (JSON lines) and train_ref.py's
trajectory.json, step by step, with the relative gap between them in a second panel.

    python3 plot_losses.py gpt2vk_train.jsonl torch_train.json out.svg [title]
"""
import json
import math
import sys


def polyline(values, x0, y0, w, h, lo, hi, colour):
    n = len(values)
    pts = " ".join(f"{x0 + w * i / max(n - 1, 1):.1f},{y0 + h - h * (v - lo) / (hi - lo):.1f}"
                   for i, v in enumerate(values))
    return f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{pts}"/>'


def main():
    ours = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"loss"' in l]
    ref = json.load(open(sys.argv[2]))["losses"]
    title = sys.argv[4] if len(sys.argv) > 4 else "training loss"
    n = min(len(ours), len(ref))
    ours, ref = ours[:n], ref[:n]
    gap = [max(abs(a - b) / b, 1e-9) for a, b in zip(ours, ref)]
    lo, hi = min(ours + ref), max(ours + ref)
    glo, ghi = math.log10(min(gap)), math.log10(max(gap))
    x0, w = 60, 560
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="660" height="480" '
           'font-family="sans-serif" font-size="12">', '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="330" y="20" text-anchor="middle">{title}</text>']
    for y0, h, a, b, label in ((40, 260, lo, hi, "loss"), (340, 100, glo, ghi, "log10 |gap| / loss")):
        out += [f'<line x1="{x0}" y1="{y0 + h}" x2="{x0 + w}" y2="{y0 + h}" stroke="black"/>',
                f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y0 + h}" stroke="black"/>',
                f'<text x="4" y="{y0 + 4}">{b:.3g}</text>', f'<text x="4" y="{y0 + h}">{a:.3g}</text>',
                f'<text x="{x0 + 6}" y="{y0 + 12}">{label}</text>']
    out.append(polyline(ref, x0, 40, w, 260, lo, hi, "#ff7f0e"))
    out.append(polyline(ours, x0, 40, w, 260, lo, hi, "#1f77b4"))
    out.append(polyline([math.log10(g) for g in gap], x0, 340, w, 100, glo, ghi, "#555555"))
    out += [f'<text x="330" y="470" text-anchor="middle">step (1 .. {n})</text>',
            '<text x="440" y="70" fill="#1f77b4">gpt2vk train</text>',
            '<text x="440" y="86" fill="#ff7f0e">PyTorch float32</text>', '</svg>']
    open(sys.argv[3], "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
