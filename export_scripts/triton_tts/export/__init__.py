"""Voice export: models -> voice folders that the model repository serves.

- :mod:`.piper`: a Piper VITS voice, its one ONNX graph split into acoustic and vocoder.
- :mod:`.coqui`: Coqui TTS models (VITS, FastPitch, FastSpeech2, Glow-TTS, Tacotron2).
- :mod:`.graph_surgery`: small named ONNX edits both use (public names, frame cap).
- :mod:`.vocoder_graph`: vocoder rewrites (polyphase upsampling, channels-last INT8,
  the mask-free copy for one-item runs).
- :mod:`.quantize`: a voice's static INT8 vocoder and/or VITS flow (:mod:`.int8_stages`), gated
  against FP32.
- :mod:`.precision_gate`: the gate every FP16/INT8 export passes (SNR and WER against FP32).
- :mod:`.voice_runs`: a voice folder's stages run offline (calibration, the gate, benchmarks).
- :mod:`.tensorrt`: TensorRT engines for the built repository (on a GPU node).

Serving never imports this package at module level: its dependencies (torch and
coqui-tts for Coqui) are export-only.
"""
