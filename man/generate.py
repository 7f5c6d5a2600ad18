"""Write man/wardd.1 and man/wardctl.1 from the commands' own argparse parsers
(argparse-manpage), so the pages say what `--help` says. `make man` runs it;
`--check` (the suite) fails when a committed page differs from what the
parsers give. The wheel installs the pages as data (share/man/man1)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from argparse_manpage.manpage import Manpage

from wardd.client.wardctl import build_parser
from wardd.daemon.cli import _parser
from wardd.daemon.life.app import VERSION

HERE = Path(__file__).resolve().parent
PAGES = {"wardd": _parser, "wardctl": build_parser}


def page(name: str) -> str:
    """The roff source of `name`'s page, reproducible (no date: the version names it)."""
    os.environ["COLUMNS"] = "80"  # argparse wraps usage lines to the terminal's width
    parser: argparse.ArgumentParser = PAGES[name]()
    manpage = Manpage(parser)
    manpage.date = ""
    manpage.source = f"wardd {VERSION}"
    manpage.manual = "wardd manual"
    return str(manpage)


def main(argv: list[str]) -> int:
    stale = []
    for name in PAGES:
        path = HERE / f"{name}.1"
        text = page(name)
        if "--check" in argv:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.write_text(text)
    if stale:
        print(f"{', '.join(stale)}: not what the parsers give: run `make man`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
