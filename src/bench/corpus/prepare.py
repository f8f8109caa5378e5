#!/usr/bin/env python3
"""Makes pride-and-prejudice.txt from Project Gutenberg's eBook #1342 (pg1342.txt).

Usage: prepare.py pg1342.txt > pride-and-prejudice.txt

Keeps the novel's text alone, from the first sentence of Chapter I to the last of Chapter LXI:
drops Project Gutenberg's licence header and footer (the trademark notice), the title pages,
Saintsbury's preface, the list of illustrations and every [Illustration: ...] caption; removes
the `_` marks the transcription uses for italics; joins each paragraph's hard-wrapped lines
with single spaces; separates paragraphs by one blank line. See PROVENANCE.md.
"""
import sys

FIRST = "It is a truth universally acknowledged"
LAST = "her into Derbyshire, had been the means of uniting them."


def decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        # Some copies of the file were saved in Windows-1252.
        return raw.decode("cp1252")


def without_illustrations(text: str) -> str:
    out, depth, i = [], 0, 0
    while i < len(text):
        if text.startswith("[Illustration", i):
            depth, i = 1, i + len("[Illustration")
            while i < len(text) and depth:
                depth += {"[": 1, "]": -1}.get(text[i], 0)
                i += 1
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def main() -> None:
    text = decode(open(sys.argv[1], "rb").read()).replace("\r\n", "\n")
    start = text.index(FIRST)
    end = text.index(LAST) + len(LAST)
    body = without_illustrations(text[start:end]).replace("_", "")
    paragraphs = []
    for block in body.split("\n\n"):
        lines = [line.strip() for line in block.split("\n") if line.strip()]
        if lines:
            paragraphs.append(" ".join(lines))
    sys.stdout.write("\n\n".join(paragraphs) + "\n")


if __name__ == "__main__":
    main()
