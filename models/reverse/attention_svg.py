"""An SVG of one layer's cross-attention heads from `gpt2vk attention --json` (an encoder-decoder's
default part): one panel a head, rows the decoder's positions (queries), columns the source's
tokens (keys), darker for more weight.

    python3 models/reverse/attention_svg.py ATTENTION.json LAYER OUT.svg
"""
import json
import sys
from html import escape


def main():
    data = json.load(open(sys.argv[1]))
    layer, out = int(sys.argv[2]), sys.argv[3]
    heads = data["attention"][layer]
    rows, cols = data["tokens"], data["key_tokens"]
    cell, left, top, gap = 18, 52, 46, 30
    panel = len(cols) * cell
    width = left + len(heads) * (panel + gap)
    height = top + len(rows) * cell + 40
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="16" font-size="13">{escape(data["title"])}: cross-attention, '
           f'layer {layer}, each head (rows: the decoder reading, columns: the source)</text>']
    for h, weights in enumerate(heads):
        x0 = left + h * (panel + gap)
        svg.append(f'<text x="{x0}" y="{top - 18}">head {h}</text>')
        for j, tok in enumerate(cols):
            svg.append(f'<text x="{x0 + j * cell + cell / 2}" y="{top - 4}" '
                       f'text-anchor="middle">{escape(tok)}</text>')
        for i, row in enumerate(weights):
            for j, w in enumerate(row):
                shade = int(round(255 * (1 - min(max(w, 0.0), 1.0))))
                svg.append(f'<rect x="{x0 + j * cell}" y="{top + i * cell}" width="{cell}" '
                           f'height="{cell}" fill="rgb({shade},{shade},{shade})" '
                           f'stroke="#ddd" stroke-width="0.5"/>')
    for i, tok in enumerate(rows):
        svg.append(f'<text x="{left - 6}" y="{top + i * cell + 13}" '
                   f'text-anchor="end">{escape(tok)}</text>')
    svg.append("</svg>")
    open(out, "w").write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
