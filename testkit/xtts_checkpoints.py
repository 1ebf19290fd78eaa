"""Random-weight XTTS v2 checkpoints in Coqui's layout: ``model.pth``, ``config.json``,
``vocab.json`` in one folder, as Coqui's model manager leaves a downloaded XTTS v2.

The real weights cannot be downloaded on these machines; the export and its parity gate
are tested on these instead. ``size="full"`` is XTTS v2's own configuration (a 30-layer,
1024-wide GPT with 16 heads, the perceiver conditioning, 1026 audio codes, the 24 kHz
HiFi-GAN decoder with its ResNet speaker encoder): the same compute as the real model, for
benchmarks and the full-size parity test. ``size="tiny"`` shrinks the GPT (2 layers, 128
wide) for tests; the decoder and speaker encoder keep their one size (XTTS fixes it).

``vocab.json`` is a byte-pair tokenizer trained here (Hugging Face ``tokenizers``, the
library XTTS's own tokenizer loads) on texts in every XTTS language, after XTTS's own
text cleaning, with XTTS's special tokens ([STOP], [UNK], [SPACE], [START], one per
language), so that Coqui's ``VoiceBpeTokenizer`` reads it like the real one.

    python -m testkit.xtts_checkpoints --out build/xtts-random --size full
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path
from typing import Any

import torch

from testkit.coqui_checkpoints import WEIGHT_NOISE

LANGUAGES = (
    "en", "es", "fr", "de", "it", "pt", "pl", "tr", "ru", "nl", "cs", "ar", "zh-cn", "hu", "ko", "ja", "hi",
)  # fmt: skip
SPECIAL_TOKENS = ["[STOP]", "[UNK]", "[SPACE]", "[START]", *(f"[{lang}]" for lang in LANGUAGES)]
# What the tokenizer is trained on: a sentence or two per language, in its own script.
CORPUS = {
    "en": "The quick brown fox jumps over the lazy dog. Thank you for calling, how can I help you today?",
    "es": "El veloz murciélago hindú comía feliz cardillo y kiwi. Gracias por llamar, ¿en qué le ayudo?",
    "fr": "Portez ce vieux whisky au juge blond qui fume. Merci de votre appel, comment puis-je vous aider?",
    "de": "Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich. Danke für Ihren Anruf.",
    "it": "Quel vituperabile xenofobo zelante assaggia il whisky ed esclama: alleluja! Grazie mille.",
    "pt": "Luís argüia à Júlia que brações, fé, chá, óxido, pôr, zângão eram palavras do português.",
    "pl": "Pchnąć w tę łódź jeża lub ośm skrzyń fig. Dziękujemy za telefon, w czym mogę pomóc?",
    "tr": "Pijamalı hasta yağız şoföre çabucak güvendi. Aradığınız için teşekkür ederiz.",
    "ru": "Съешь же ещё этих мягких французских булок да выпей чаю. Спасибо за звонок, чем могу помочь?",
    "nl": "Pa's wijze lynx bezag vroom het fikse aquaduct. Bedankt voor uw oproep, waarmee kan ik helpen?",
    "cs": "Příliš žluťoučký kůň úpěl ďábelské ódy. Děkujeme za zavolání, jak vám mohu pomoci?",
    "ar": "نص حكيم له سر قاطع وذو شأن عظيم مكتوب على ثوب أخضر ومغلف بجلد أزرق. شكرا لاتصالك.",
    "zh-cn": "wo3 men5 de5 tu2 shu1 guan3 mei3 tian1 zao3 shang4 jiu3 dian3 kai1 men2 xie4 xie4 ni3 de5 lai2"
    " dian4",
    "hu": "Árvíztűrő tükörfúrógép. Köszönjük a hívását, miben segíthetek?",
    "ko": "dahramjwi heon chetbakwie tago pajeun ttang kkaji tteodaensseupnida gamsahamnida",
    "ja": "iroha nihoheto chirinuru wo wakayo tareso tsune naramu arigatou gozaimasu",
    "hi": "ऋषियों को सताने वाले दुष्ट राक्षसों के राजा रावण का सर्वनाश करने वाले विष्णुवतार भगवान श्रीराम।",
}
FULL_TEXT_TOKENS = 6681  # XTTS v2's vocabulary size (the text embedding and head)


def build_vocab(path: Path, vocab_size: int) -> int:
    """Train and write a byte-pair ``vocab.json``; returns its number of tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))  # noqa: S106
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False)
    lines = [text.lower() for text in CORPUS.values()]
    # every word again with each neighbour, so that merges reach across more of the alphabet
    words = " ".join(lines).split()
    lines += [f"{a} {b}" for a, b in itertools.pairwise(words)]
    tokenizer.train_from_iterator(lines, trainer=trainer)
    path.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(path))
    return int(tokenizer.get_vocab_size())


def xtts_config(
    size: str, number_text_tokens: int, max_audio_tokens: int | None = None, perceiver: bool = True
) -> Any:
    """XTTS v2's config.json (its published model arguments and inference settings);
    ``tiny`` shrinks the GPT, ``max_audio_tokens`` caps a generation (random weights rarely
    choose the stop code, so greedy runs go to the cap); ``perceiver`` False conditions as
    Coqui does without the perceiver resampler (XTTS v1's way: one pass over the whole clip)."""
    from TTS.tts.configs.xtts_config import XttsConfig

    config = XttsConfig()
    args = config.model_args
    args.gpt_number_text_tokens = number_text_tokens
    args.gpt_num_audio_tokens = 1026
    args.gpt_start_audio_token = 1024
    args.gpt_stop_audio_token = 1025
    args.gpt_use_perceiver_resampler = perceiver
    args.gpt_use_masking_gt_prompt_approach = True
    args.gpt_max_audio_tokens = 605
    args.gpt_max_text_tokens = 402
    args.gpt_layers, args.gpt_n_model_channels, args.gpt_n_heads = 30, 1024, 16
    if size == "tiny":
        args.gpt_layers, args.gpt_n_model_channels, args.gpt_n_heads = 2, 128, 4
        args.decoder_input_dim = 128
    if max_audio_tokens is not None:
        args.gpt_max_audio_tokens = max_audio_tokens
    # XTTS v2's config.json inference settings
    config.temperature, config.length_penalty, config.repetition_penalty = 0.75, 1.0, 5.0
    config.top_k, config.top_p = 50, 0.85
    config.gpt_cond_len, config.gpt_cond_chunk_len, config.max_ref_len = 30, 4, 30
    config.languages = list(LANGUAGES)
    return config


def build_xtts(
    folder: Path,
    size: str = "tiny",
    seed: int = 0,
    max_audio_tokens: int | None = None,
    perceiver: bool = True,
) -> Path:
    """Build, perturb and save a random-weight XTTS v2 into ``folder``; returns ``folder``."""
    from TTS.tts.models.xtts import Xtts

    torch.manual_seed(seed)
    folder = Path(folder)
    tokens = build_vocab(folder / "vocab.json", FULL_TEXT_TOKENS if size == "full" else 1000)
    config = xtts_config(size, tokens, max_audio_tokens, perceiver)
    model = Xtts(config)
    model.tokenizer = _tokenizer(folder / "vocab.json")
    model.init_models()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.startswith("hifigan_decoder.speaker_encoder"):
                continue  # a ResNet with batch norms: noise on them makes its output NaN-prone
            parameter.add_(torch.randn_like(parameter) * WEIGHT_NOISE)
        # per-bin mel normalisers, positive like the real clips_mel_norms
        model.mel_stats.copy_(torch.linspace(2.0, 4.0, model.mel_stats.numel()))
    state = {key: value for key, value in model.state_dict().items() if ".gpt_inference." not in key}
    folder.mkdir(parents=True, exist_ok=True)
    torch.save({"model": state, "config": config.to_dict()}, folder / "model.pth")
    (folder / "config.json").write_text(json.dumps(config.to_dict(), indent=2), encoding="utf-8")
    return folder


def _tokenizer(vocab: Path) -> Any:
    from TTS.tts.layers.xtts.tokenizer import VoiceBpeTokenizer

    return VoiceBpeTokenizer(vocab_file=str(vocab))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--size", choices=("tiny", "full"), default="tiny")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-audio-tokens", type=int, help="cap a generation (default: XTTS's 605)")
    parser.add_argument(
        "--no-perceiver",
        action="store_true",
        help="condition without the perceiver resampler (XTTS v1's way)",
    )
    args = parser.parse_args(argv)
    print(build_xtts(args.out, args.size, args.seed, args.max_audio_tokens, perceiver=not args.no_perceiver))


if __name__ == "__main__":
    main()


def voiced_clip(seed: int, seconds: float, rate: int = 22050) -> Any:
    """A voiced reference clip (float32): a pitch track with harmonics, noise and a level
    of its own per seed."""
    import numpy as np

    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    pitch = rng.uniform(90, 250) * (1 + 0.2 * np.sin(2 * np.pi * rng.uniform(0.3, 2) * t))
    phase = 2 * np.pi * np.cumsum(pitch) / rate
    tone = sum(np.sin(k * phase + rng.uniform(0, 6)) * rng.uniform(0.1, 1) for k in range(1, 10))
    return (rng.uniform(0.05, 0.3) * tone + rng.standard_normal(t.shape[0]) * 0.03).astype(np.float32)
