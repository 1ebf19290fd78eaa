"""Coqui XTTS v2 served from its exported graphs, with no torch and no coqui-tts.

An XTTS voice folder (written by ``triton-tts export coqui`` from an XTTS checkpoint)::

    voices/xtts/
      xtts.json          :class:`~triton_tts.xtts.card.XttsCard`: sizes, tokens, limits,
                         languages, Coqui's sampling defaults, the licence
      vocab.json         XTTS's byte-pair tokenizer, as Coqui ships it
      style.onnx         AUDIO[1,N] (22.05 kHz) -> STYLE[1,32,D]: one chunk's GPT conditioning
                         (without the perceiver: STYLE[1,frames,D] of the whole clip)
      speaker.onnx       AUDIO[1,N] (22.05 kHz) -> SPEAKER[1,512]: the decoder's speaker embedding
      gpt.onnx           EMBEDDINGS[B,S,D], PAST[B,L,2,H,P,hd], MASK[B,P+S]
                         -> LOGITS[B,codes], LATENT[B,D], PRESENT[B,L,2,H,S,hd]
      embeddings.npz     the GPT's token and position tables (the caller sums the rows)
      decoder.onnx       LATENTS[B,T,D], SPEAKER[B,512] -> WAVEFORM[B,samples] (24 kHz)

The modules, each importing only the ones above it:

- :mod:`.card`: the voice card and the folder's file names.
- :mod:`.sampling`: one decode step's choice of code (repetition penalty, temperature,
  top-k, top-p; greedy at temperature 0), as Hugging Face's ``generate`` makes it.
- :mod:`.runner`: conditioning from a clip, the generation loop over the GPT's cache, and
  the decoder, on ONNX Runtime.
"""
