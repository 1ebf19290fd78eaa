"""Coqui TTS models -> a voice folder (acoustic ONNX + vocoder ONNX + voice.json).

    triton-tts export coqui --model-name tts_models/en/ljspeech/vits --out voices/ljs
    triton-tts export coqui --checkpoint model.pth --config config.json \\
        --vocoder-checkpoint hifigan.pth --vocoder-config hifigan.json --out voices/mine

A model name is fetched through Coqui's own model manager (network needed, once); files
are loaded with Coqui's own ``Synthesizer``, the same object ``tts-server`` serves, so
what is exported is exactly what Coqui would run. Each family has a wrapper module that
re-states Coqui's inference with per-item lengths, speakers and scales, so that an item's
output in a padded batch equals its batch-1 output (Coqui's own inference assumes batch 1
in several places), and with noise scaled per request (zero noise: deterministic).

The modules, each importing only the ones above it:

- :mod:`.arguments`: the command's arguments (no torch: the CLI lists every command).
- :mod:`.loading`: checkpoint, config or model-name download -> Coqui's ``Synthesizer``.
- :mod:`.masks`, :mod:`.padding_safe`: per-item lengths in a padded batch (masks, frame
  padding, alignment paths; convolutional generators that ignore the padding).
- :mod:`.onnx_export`: wrapper modules -> ONNX files (opset, tensor names, dynamic axes).
- :mod:`.mel_vocoder`: the GAN vocoder (HiFi-GAN, MelGAN) of every mel family.
- Family wrappers: :mod:`.vits`, :mod:`.forward_tts` (FastPitch, FastSpeech2),
  :mod:`.glow_tts`, :mod:`.tacotron2` (step-wise); :mod:`.mel_acoustic` is what the
  FastPitch / FastSpeech2 / Glow-TTS wrappers share.
- :mod:`.registry`: the supported families and how each is exported.
- :mod:`.voice_description`: voice.json's facts, read from Coqui's tokenizer and configs.
- :mod:`.precision`: fp16 and int8 variants of an exported voice, through the precision gate.
- :mod:`.export`: the whole export of one loaded model; :mod:`.cli`: the command.

Export uses torch's legacy TorchScript-based exporter at opset 17. Random-weight
checkpoints and Coqui's own inference, which the tests compare the exports against, are
test helpers: :mod:`testkit`.

This file imports nothing, so that ``triton_tts.export.coqui.arguments`` stays free of
torch and coqui-tts (export-only dependencies).
"""
