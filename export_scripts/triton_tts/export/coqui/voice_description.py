"""The voice description (voice.json) of a Coqui model: tokens, framing, speakers and
audio facts, read from Coqui's tokenizer and configs."""

from __future__ import annotations

from triton_tts.contract.voice import Voice
from triton_tts.export.coqui.loading import Loaded


def voice_for(loaded: Loaded, name: str, noise_scale: float = 0.0, noise_w: float = 0.0) -> Voice:
    """``loaded`` as a :class:`Voice` named ``name``, with the family's default noise.
    ``latent_channels`` and the stage layout are filled in by the export."""
    tts = loaded.tts
    tokenizer = tts.tokenizer
    characters = tokenizer.characters
    config = loaded.synthesizer.tts_config
    symbols = {ch: [i] for i, ch in enumerate(characters.vocab) if ch}
    language = getattr(config, "phoneme_language", None) or "en-us"
    speakers = {}
    if getattr(tts, "speaker_manager", None) is not None and tts.num_speakers > 1:
        speakers = {str(k): int(v) for k, v in tts.speaker_manager.name_to_id.items()}
    blank = [characters.blank_id] if tokenizer.add_blank else None
    sample_rate = int(tts.ap.sample_rate)
    if (
        loaded.vocoder is not None
        and int(loaded.synthesizer.vocoder_config.audio["sample_rate"]) != sample_rate
    ):
        raise ValueError(
            "the vocoder's sample rate differs from the TTS model's; resampling is not supported"
        )
    return Voice(
        name=name,
        sample_rate=sample_rate,
        hop_length=int(tts.ap.hop_length),
        latent_channels=0,  # filled in from the exported vocoder
        phonemizer_language=language,
        symbols=symbols,
        speakers=speakers,
        noise_scale=noise_scale,
        length_scale=1.0,
        noise_w=noise_w,
        source=f"coqui:{loaded.source}",
        bos=[characters.bos_id] if tokenizer.use_eos_bos else [],
        eos=[characters.eos_id] if tokenizer.use_eos_bos else [],
        intersperse=blank or [],
        pad_id=int(characters.pad_id) if characters.pad_id is not None else 0,
        tokens="phonemes" if tokenizer.phonemizer is not None else "characters",
        family=loaded.family,
    )
