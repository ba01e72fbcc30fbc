"""The corpus and its fixed train / held-out split, shared by train.py and sample.py.

kjv.txt (from extract_kjv.py) is chapters of one-verse-per-line text, each chapter followed by a
blank line. Held out: every 20th chapter in canonical order (0-based chapter index i with
i % 20 == 19: Genesis 20, Genesis 40, Exodus 10, ... ; 59 of 1189 chapters, about 5% of the
bytes), so validation samples the whole book, Law to Revelation, rather than one style of it.
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "data", "kjv.txt")
HOLDOUT_EVERY = 20
HELDOUT_FILE_BUDGET = 48 * 1024  # heldout.txt: the first held-out chapters that fit in this


def chapters(path=CORPUS):
    """Returns each chapter's bytes, blank line included, in canonical order."""
    with open(path, "rb") as f:
        data = f.read()
    parts = data.split(b"\n\n")
    if parts[-1] != b"":
        raise SystemExit(f"{path}: does not end with a blank line; rerun extract_kjv.py")
    return [p + b"\n\n" for p in parts[:-1]]


def is_heldout(i):
    return i % HOLDOUT_EVERY == HOLDOUT_EVERY - 1


def split(path=CORPUS):
    """Returns (train_bytes, heldout_bytes): each the concatenation of its chapters."""
    chs = chapters(path)
    train = b"".join(c for i, c in enumerate(chs) if not is_heldout(i))
    held = b"".join(c for i, c in enumerate(chs) if is_heldout(i))
    return train, held


def train_probe(path=CORPUS):
    """Training chapters with i % 20 == 9 (about as many bytes as the held-out split): the train
    loss reported beside the held-out loss, scored the same way."""
    return b"".join(c for i, c in enumerate(chapters(path)) if i % HOLDOUT_EVERY == 9)


def heldout_file_text(path=CORPUS):
    """The small held-out sample shipped as models/kjv/heldout.txt: whole held-out chapters
    from the start while they fit in HELDOUT_FILE_BUDGET bytes."""
    out = b""
    for i, c in enumerate(chapters(path)):
        if is_heldout(i):
            if len(out) + len(c) > HELDOUT_FILE_BUDGET:
                break
            out += c
    return out
