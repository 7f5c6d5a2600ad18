"""The public face of the error table; ``python -m wardd.protocol.errors`` prints it.

The table lives in `wardd.protocol._errors` (re-exported here and by
`wardd.protocol`); this module exists so that the documentation can be
generated from the table itself:

    python -m wardd.protocol.errors > docs/errors.md
"""

from __future__ import annotations

from ._errors import *  # noqa: F403
from ._errors import __all__ as __all__
from ._errors import markdown_table


def main() -> None:
    """Print the error table as markdown."""
    print("# wardd error codes (docs/contract.md §4)\n")
    print(markdown_table(), end="")


if __name__ == "__main__":
    main()
