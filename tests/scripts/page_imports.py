"""Builds the page and prints which heavy ML packages that imported, as a sorted list (test_layout)."""

import sys

from playground.ui.wiring import build_ui


def main() -> None:
    build_ui()
    print(sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "jax", "torchax", "transformers")))


if __name__ == "__main__":
    main()
