#!/usr/bin/python3
"""Writes the King James Bible from Debian's bible-kjv package as plain UTF-8 text.

One `bible -f Gen1:1-Rev22:21` call dumps every verse, one per line, as "<ref> <text>" (with -f
pretty-printing is off, so there are no line breaks inside a verse). We strip the reference and
write each verse on its own line, with one blank line after every chapter, so the chapter is the
unit train.py splits on. The dump is checked against the canon's counts (66 books, 1189
chapters, 31102 verses) and against verse numbers running 1, 2, 3... inside each chapter, so a
changed package fails loudly instead of training on something else.

Usage: /usr/bin/python3 tools/train_kjv/extract_kjv.py [--out tools/train_kjv/data/kjv.txt]
The KJV text is in the public domain.
"""
import argparse
import hashlib
import os
import re
import subprocess
import sys

REF = re.compile(r"^([1-3]?[A-Za-z]+)(\d+):(\d+) (\S.*)$")
BOOKS, CHAPTERS, VERSES = 66, 1189, 31102


def dump_bible(binary):
    # stdin closed: given references on the command line bible prints them and exits.
    out = subprocess.run([binary, "-f", "Gen1:1-Rev22:21"], stdin=subprocess.DEVNULL,
                         capture_output=True, check=True, env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"})
    return out.stdout.decode("ascii")


def parse_chapters(raw):
    """Returns [(book, chapter, [verse text...])] in canonical order."""
    chapters = []
    for n, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        m = REF.match(line)
        if not m:
            sys.exit(f"extract_kjv: line {n}: not '<ref> <text>': {line[:60]!r}")
        book, chap, verse, text = m[1], int(m[2]), int(m[3]), m[4].strip()
        if not chapters or chapters[-1][:2] != (book, chap):
            chapters.append((book, chap, []))
        verses = chapters[-1][2]
        if verse != len(verses) + 1:
            sys.exit(f"extract_kjv: line {n}: {book}{chap}:{verse} follows verse {len(verses)}")
        verses.append(" ".join(text.split()))
    return chapters


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "data", "kjv.txt"))
    ap.add_argument("--bible", default="/usr/bin/bible")
    args = ap.parse_args()

    chapters = parse_chapters(dump_bible(args.bible))
    books = len(dict.fromkeys(b for b, _, _ in chapters))
    verses = sum(len(v) for _, _, v in chapters)
    if (books, len(chapters), verses) != (BOOKS, CHAPTERS, VERSES):
        sys.exit(f"extract_kjv: got {books} books, {len(chapters)} chapters, {verses} verses; "
                 f"expected {BOOKS}, {CHAPTERS}, {VERSES}")
    text = "".join("\n".join(v) + "\n\n" for _, _, v in chapters)
    data = text.encode("utf-8")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "wb") as f:
        f.write(data)
    print(f"{args.out}: {len(data)} bytes, {books} books, {len(chapters)} chapters, {verses} verses, "
          f"sha256 {hashlib.sha256(data).hexdigest()}")


if __name__ == "__main__":
    main()
