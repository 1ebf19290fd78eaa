"""``python -m triton_tts.cli``: the ``triton-tts`` command."""

import sys

from triton_tts.cli import main

sys.exit(main())
