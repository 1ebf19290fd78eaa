"""``python -m triton_tts.export.coqui``: the same command as ``triton-tts export coqui``."""

from triton_tts.export.coqui.cli import main

main()
