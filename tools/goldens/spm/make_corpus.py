#!/usr/bin/env python3
"""Writes tests/data/spm/corpus.txt.xz: the SentencePiece check's many-script corpus.

The text is the translations GTK 3 and GLib ship in Debian 12 (gtk30.mo from libgtk-3-common,
glib20.mo from libglib2.0-data; LGPL-2+ and LGPL-2.1+, /usr/share/doc/<package>/copyright) in the
locales below: Arabic, Hebrew, Devanagari, Thai, Japanese, Chinese, Korean, Georgian, Greek,
Cyrillic and Latin with diacritics. Each message's translation is cut into lines; empty lines and
repeats are dropped, the first occurrence kept in the order below (locale, then file, then the
catalogue's own msgid order), so that the same packages give the same bytes.

    /usr/bin/python3 tools/goldens/spm/make_corpus.py   # prints the line count, size and sha256
"""
import hashlib
import lzma
import pathlib
import struct
import sys

LOCALES = ["ar", "he", "hi", "th", "ja", "zh_CN", "ko", "ka", "el", "ru", "de", "fr", "pl", "vi"]
DOMAINS = ["gtk30", "glib20"]
OUT = pathlib.Path(__file__).resolve().parents[3] / "tests/data/spm/corpus.txt.xz"


def translations(mo: bytes):
    """The translated strings of a GNU .mo catalogue (plural forms each), without its header."""
    order = "<" if struct.unpack("<I", mo[:4])[0] == 0x950412DE else ">"
    _, n, originals, translated = struct.unpack(order + "4I", mo[4:20])
    for i in range(n):
        length, _ = struct.unpack(order + "2I", mo[originals + 8 * i:originals + 8 * i + 8])
        if length == 0:
            continue  # the empty msgid: the catalogue's header
        length, offset = struct.unpack(order + "2I", mo[translated + 8 * i:translated + 8 * i + 8])
        for form in mo[offset:offset + length].split(b"\0"):
            yield form.decode("utf-8")


def main():
    seen, lines = set(), []
    for locale in LOCALES:
        for domain in DOMAINS:
            mo = pathlib.Path(f"/usr/share/locale/{locale}/LC_MESSAGES/{domain}.mo").read_bytes()
            for text in translations(mo):
                for line in text.split("\n"):
                    if line.strip() and line not in seen:
                        seen.add(line)
                        lines.append(line)
    data = ("\n".join(lines) + "\n").encode("utf-8")
    # xz at a fixed preset: Python's lzma (the test's reader) needs nothing installed.
    OUT.write_bytes(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))
    print(f"{len(lines)} lines, {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}; "
          f"{OUT.stat().st_size} bytes compressed", file=sys.stderr)


if __name__ == "__main__":
    main()
