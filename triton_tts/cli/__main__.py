"""``python -m triton_tts.cli``: the ``triton-tts`` command."""

import sys

from triton_tts.cli import main

if __name__ == "__main__":
    sys.exit(main())
